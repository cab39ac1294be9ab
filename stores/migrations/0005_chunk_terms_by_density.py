from django.db import migrations


class Migration(migrations.Migration):
    """Each term's postings ordered by density (tf / chunk length, highest first), for BM25 on
    terms present in most chunks: the search reads only their densest postings as candidates
    instead of the whole list (retrieval.bm25._bm25_statement). The expression must stay the one
    the search orders by. Built concurrently so ingestion is not blocked on a large table."""

    atomic = False

    dependencies = [
        ("stores", "0004_document_error_stage"),
    ]

    operations = [
        migrations.RunSQL(
            """
            CREATE INDEX CONCURRENTLY IF NOT EXISTS chunk_terms_by_density ON chunk_terms
            (store_id, term, (tf::float8 / greatest(chunk_length, 1)) DESC, chunk_id) INCLUDE (tf, chunk_length);
            """,
            reverse_sql="DROP INDEX CONCURRENTLY IF EXISTS chunk_terms_by_density;",
        ),
    ]
