package sqlite

// Migrations are the schema's migrations, for a test that builds a
// database as an earlier version left it.
var Migrations = dialect.Migrations
