from django.db import migrations


class Migration(migrations.Migration):
    """One chunk's postings with their tf and length in the index itself, for BM25's exact
    rescoring of its candidates (retrieval.bm25._bm25_statement): a probe per candidate for the
    query's terms, answered from the index alone, where the primary key (chunk_id, term) would
    fetch every matching row from the table. Built concurrently so ingestion is not blocked on
    a large table."""

    atomic = False

    dependencies = [
        ("stores", "0005_chunk_terms_by_density"),
    ]

    operations = [
        migrations.RunSQL(
            """
            CREATE INDEX CONCURRENTLY IF NOT EXISTS chunk_terms_by_chunk ON chunk_terms
            (chunk_id, term) INCLUDE (tf, chunk_length);
            """,
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS chunk_terms_by_chunk;",
        ),
    ]
