# shellcheck shell=bash
# pg.sh: a throwaway PostgreSQL server for the store tests. Source it, then
#
#   source scripts/pg.sh
#   pg_start            # exports HANDOFF_TEST_POSTGRES
#   trap pg_stop EXIT
#   go test ./store/...
#
# pg_start finds initdb and pg_ctl (/usr/lib/postgresql/*/bin, newest
# first, or PATH), installing Debian's postgresql package when they are
# missing (as root: apt-get). It initializes a cluster in a fresh temporary
# directory, starts it listening only on a Unix socket in that directory
# (no TCP), with fsync on, and exports
#
#   HANDOFF_TEST_POSTGRES="host=DIR port=PORT user=postgres dbname=postgres sslmode=disable"
#
# The server runs as the invoking user, or as "postgres" when invoked as
# root (initdb refuses root); that user is created if absent. pg_stop stops
# the server and removes the directory. Both return non-zero on failure and
# never exit the calling shell. Options for the server can be added with
# PG_EXTRA_OPTS (passed to postgres through pg_ctl -o).

_pg_dir=""
_pg_bindir=""
_pg_user=""

_pg_log() { echo "pg.sh: $*" >&2; }

# _pg_find_bindir prints the directory holding initdb and pg_ctl.
_pg_find_bindir() {
	local d
	# Debian's versioned directories, newest first.
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -t/ -k5,5 -rn); do
		if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then
			echo "$d"
			return 0
		fi
	done
	local i p
	i=$(command -v initdb 2>/dev/null) || return 1
	p=$(command -v pg_ctl 2>/dev/null) || return 1
	i=$(readlink -f "$i")
	p=$(readlink -f "$p")
	if [ "$(dirname "$i")" = "$(dirname "$p")" ]; then
		dirname "$i"
		return 0
	fi
	return 1
}

_pg_install() {
	if [ "$(id -u)" != 0 ]; then
		_pg_log "initdb/pg_ctl not found and not root: install PostgreSQL (Debian: apt-get install postgresql)"
		return 1
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		_pg_log "initdb/pg_ctl not found and no apt-get to install PostgreSQL with"
		return 1
	fi
	_pg_log "installing PostgreSQL (apt-get install postgresql)"
	apt-get update >&2 &&
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends postgresql >&2
}

# _pg_as runs a command as the server's user, from the cluster directory
# (the postgres user may not be able to read the caller's working
# directory).
_pg_as() {
	if [ -n "$_pg_user" ]; then
		(cd "$_pg_dir" && runuser -u "$_pg_user" -- "$@")
	else
		(cd "$_pg_dir" && "$@")
	fi
}

# _pg_free_port prints a port number that no local TCP socket uses. The
# server listens on no TCP port; the number only names the socket file
# (.s.PGSQL.PORT) and keys the server's shared memory.
_pg_free_port() {
	local port tries=0
	while [ $tries -lt 100 ]; do
		port=$((20000 + RANDOM % 40000))
		tries=$((tries + 1))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

pg_start() {
	if [ -n "$_pg_dir" ]; then
		_pg_log "already started in $_pg_dir"
		return 0
	fi
	if ! _pg_bindir=$(_pg_find_bindir); then
		_pg_install || return 1
		if ! _pg_bindir=$(_pg_find_bindir); then
			_pg_log "initdb/pg_ctl still not found after installing postgresql"
			return 1
		fi
	fi

	_pg_user=""
	if [ "$(id -u)" = 0 ]; then
		_pg_user=postgres
		if ! id -u "$_pg_user" >/dev/null 2>&1; then
			_pg_log "creating user $_pg_user"
			useradd --system --user-group --no-create-home --home-dir /nonexistent \
				--shell /usr/sbin/nologin "$_pg_user" || return 1
		fi
	fi

	# A short path under /tmp: a Unix socket path is limited to ~107 bytes.
	_pg_dir=$(mktemp -d /tmp/handoff-pg.XXXXXX) || { _pg_dir=""; return 1; }
	chmod 700 "$_pg_dir"
	if [ -n "$_pg_user" ]; then
		chown "$_pg_user:" "$_pg_dir" || { pg_stop; return 1; }
	fi

	local port
	port=$(_pg_free_port) || { _pg_log "no free port number"; pg_stop; return 1; }

	# initdb's own fsyncs are skipped (-N): the cluster is thrown away with
	# the directory. The server itself runs with fsync on.
	if ! _pg_as "$_pg_bindir/initdb" -D "$_pg_dir/data" -U postgres --auth=trust \
		--encoding=UTF8 --locale=C -N >"$_pg_dir/initdb.log" 2>&1; then
		_pg_log "initdb failed:"
		cat "$_pg_dir/initdb.log" >&2
		pg_stop
		return 1
	fi

	local opts="-c listen_addresses='' -c unix_socket_directories='$_pg_dir' -p $port"
	opts+=" -c fsync=on -c synchronous_commit=on -c full_page_writes=on"
	opts+=" -c max_connections=300 ${PG_EXTRA_OPTS:-}"
	if ! _pg_as "$_pg_bindir/pg_ctl" -D "$_pg_dir/data" -l "$_pg_dir/server.log" \
		-w -t 60 -o "$opts" start >/dev/null; then
		_pg_log "pg_ctl start failed:"
		cat "$_pg_dir/server.log" >&2
		pg_stop
		return 1
	fi

	export HANDOFF_TEST_POSTGRES="host=$_pg_dir port=$port user=postgres dbname=postgres sslmode=disable"
	_pg_log "PostgreSQL $("$_pg_bindir/pg_ctl" --version | awk '{print $3}') up: $HANDOFF_TEST_POSTGRES"
}

pg_stop() {
	[ -n "$_pg_dir" ] || return 0
	local rc=0
	if [ -f "$_pg_dir/data/postmaster.pid" ]; then
		_pg_as "$_pg_bindir/pg_ctl" -D "$_pg_dir/data" -m fast -w -t 60 stop >/dev/null || rc=1
	fi
	rm -rf "$_pg_dir" || rc=1
	_pg_dir=""
	unset HANDOFF_TEST_POSTGRES
	return $rc
}
