from django.db import migrations


class Migration(migrations.Migration):
    """The BM25 postings index keyed by chunk within each term, so besides reading a term's
    whole postings list, a search can look up one chunk's posting of one term from the index
    alone (BM25 pruning checks the common terms of a few candidate chunks that way)."""

    dependencies = [
        ("stores", "0001_initial"),
    ]

    operations = [
        migrations.RunSQL(
            """
            DROP INDEX IF EXISTS chunk_terms_postings;
            CREATE INDEX chunk_terms_postings ON chunk_terms (store_id, term, chunk_id) INCLUDE (tf, chunk_length);
            """,
            reverse_sql="""
            DROP INDEX IF EXISTS chunk_terms_postings;
            CREATE INDEX chunk_terms_postings ON chunk_terms (store_id, term) INCLUDE (chunk_id, tf, chunk_length);
            """,
        ),
    ]
