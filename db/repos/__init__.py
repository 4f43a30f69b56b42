"""The store's repositories, one per aggregate; `db.store.Store` opens them together."""
