package postgres_test

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"testing"

	"github.com/quantumlearningmachines/handoff/store"
	"github.com/quantumlearningmachines/handoff/store/storetest"
)

// TestListByteOrderInALocale: the listings (of hops received, and of hops
// issued) order text by bytes on a database whose collation is a
// language's (ICU en-US, as production databases usually have a locale),
// not only on the test server's "C". Without its COLLATE "C", the listing
// sorted the model's names as English does and this test failed.
func TestListByteOrderInALocale(t *testing.T) {
	admin := adminDSN(t)
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var b [8]byte
	rand.Read(b[:])
	name := "handoff_icu_" + hex.EncodeToString(b[:])
	if _, err := db.ExecContext(t.Context(), "CREATE DATABASE "+name+" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US'"); err != nil {
		t.Fatalf("create an ICU database (PostgreSQL built with ICU, as Debian's is): %v", err)
	}
	t.Cleanup(func() {
		if _, err := db.Exec("DROP DATABASE " + name + " WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	storetest.RunList(t, func(t *testing.T) store.Store {
		s := open(t, admin+" dbname="+name)
		if _, err := s.DB().ExecContext(t.Context(), "DELETE FROM hops; DELETE FROM flags"); err != nil {
			t.Fatal(err)
		}
		return s
	})
	storetest.RunListIssued(t, func(t *testing.T) store.Tracker {
		s := open(t, admin+" dbname="+name)
		if _, err := s.DB().ExecContext(t.Context(), "DELETE FROM issued"); err != nil {
			t.Fatal(err)
		}
		return s
	})
}
