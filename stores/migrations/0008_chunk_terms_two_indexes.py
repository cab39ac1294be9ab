from django.db import migrations


class Migration(migrations.Migration):
    """Postings kept in two indexes instead of four, halving what every posting written costs
    (ingestion, and the lexical rebuild, which rewrites a store's postings).

    - `chunk_terms_postings` (store_id, term, chunk_id) is read by nothing since BM25 reads every
      term's postings in density order (migration 0005): `chunk_terms_by_density` has the same
      leading columns and carries tf and length too, so it also serves the store foreign key.
    - The primary key (chunk_id, term) and `chunk_terms_by_chunk` (chunk_id, term) INCLUDE (tf,
      chunk_length) were one index twice: the primary key now carries the included columns.

    The new key index is built concurrently, then swapped in; ingestion is not blocked meanwhile.

    The postings' foreign key to the store goes too: a store's postings already go with its
    chunks (chunk_terms_chunk_fk cascades), and the per-row check it added cost a quarter of
    the time spent writing postings."""

    atomic = False

    dependencies = [
        ("stores", "0007_index_config"),
    ]

    operations = [
        migrations.RunSQL(
            "ALTER TABLE chunk_terms DROP CONSTRAINT IF EXISTS chunk_terms_store_fk;",
            reverse_sql="ALTER TABLE chunk_terms ADD CONSTRAINT chunk_terms_store_fk "
            "FOREIGN KEY (store_id) REFERENCES rag_stores(id) ON DELETE CASCADE;",
        ),
        migrations.RunSQL(
            """
            CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS chunk_terms_key_covering ON chunk_terms
            (chunk_id, term) INCLUDE (tf, chunk_length);
            """,
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS chunk_terms_key_covering;",
        ),
        migrations.RunSQL(
            """
            ALTER TABLE chunk_terms DROP CONSTRAINT chunk_terms_pkey,
                ADD CONSTRAINT chunk_terms_pkey PRIMARY KEY USING INDEX chunk_terms_key_covering;
            """,
            reverse_sql="""
            ALTER TABLE chunk_terms DROP CONSTRAINT chunk_terms_pkey, ADD CONSTRAINT chunk_terms_pkey PRIMARY KEY (chunk_id, term);
            """,
        ),
        migrations.RunSQL(
            "DROP INDEX CONCURRENTLY IF EXISTS chunk_terms_by_chunk;",
            reverse_sql="""
            CREATE INDEX CONCURRENTLY IF NOT EXISTS chunk_terms_by_chunk ON chunk_terms
            (chunk_id, term) INCLUDE (tf, chunk_length);
            """,
        ),
        migrations.RunSQL(
            "DROP INDEX CONCURRENTLY IF EXISTS chunk_terms_postings;",
            reverse_sql="CREATE INDEX CONCURRENTLY IF NOT EXISTS chunk_terms_postings ON chunk_terms "
            "(store_id, term, chunk_id) INCLUDE (tf, chunk_length);",
        ),
    ]
