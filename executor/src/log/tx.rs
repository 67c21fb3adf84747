//! A transaction begun, committed and rolled back with statements the connection keeps
//! prepared. rusqlite's `Transaction` runs `BEGIN` and `COMMIT` through `execute_batch`, which
//! parses and prepares the statement anew each time: every proposal and every pass commits,
//! so that parse was a fair part of what a write costs in the simulation. The statements and
//! their order are rusqlite's: `BEGIN DEFERRED` or `BEGIN IMMEDIATE`, `COMMIT`, and a
//! `ROLLBACK` when a transaction still open is dropped (rusqlite's default drop behaviour).

use std::ops::Deref;

use rusqlite::Connection;

/// An open transaction on a connection; rolled back when dropped uncommitted.
pub(super) struct Tx<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Tx<'c> {
    /// `BEGIN DEFERRED`: the locks are taken by the first read and the first write.
    pub(super) fn deferred(conn: &'c Connection) -> rusqlite::Result<Tx<'c>> {
        Tx::begin(conn, "BEGIN DEFERRED")
    }

    /// `BEGIN IMMEDIATE`: the write lock first, waited for like any other write.
    pub(super) fn immediate(conn: &'c Connection) -> rusqlite::Result<Tx<'c>> {
        Tx::begin(conn, "BEGIN IMMEDIATE")
    }

    fn begin(conn: &'c Connection, sql: &str) -> rusqlite::Result<Tx<'c>> {
        conn.prepare_cached(sql)?.execute([])?;
        Ok(Tx { conn, open: true })
    }

    /// `COMMIT`. If it fails the transaction stays open, and dropping it rolls it back.
    pub(super) fn commit(mut self) -> rusqlite::Result<()> {
        self.conn.prepare_cached("COMMIT")?.execute([])?;
        self.open = false;
        Ok(())
    }
}

impl Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        // As rusqlite's: nothing to roll back once SQLite itself ended the transaction.
        if self.open && !self.conn.is_autocommit() {
            let _ = self.conn.prepare_cached("ROLLBACK").and_then(|mut stmt| stmt.execute([]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Tx;
    use rusqlite::Connection;

    /// Committed work stays, work of a transaction dropped open is rolled back, and the
    /// statements can be used again and again.
    #[test]
    fn commits_and_rolls_back_as_rusqlites_transaction() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("CREATE TABLE t (n INTEGER)").unwrap();
        for n in 0..3 {
            let tx = Tx::immediate(&conn).unwrap();
            tx.execute("INSERT INTO t (n) VALUES (?1)", [n]).unwrap();
            tx.commit().unwrap();
            let tx = Tx::deferred(&conn).unwrap();
            tx.execute("INSERT INTO t (n) VALUES (?1)", [100 + n]).unwrap();
            assert!(!conn.is_autocommit());
            drop(tx);
            assert!(conn.is_autocommit(), "rolled back");
        }
        let sum: i64 = conn.query_row("SELECT SUM(n) FROM t", [], |r| r.get(0)).unwrap();
        assert_eq!(sum, 3);
    }
}
