import django.contrib.postgres.search
from django.db import migrations, models


class Migration(migrations.Migration):
    """An indexing language per store (`index_config`). The chunk tsvector stops being a column
    generated with `simple`: the index writer stores it with the store's configuration. Existing
    tsvectors stay as they are (DROP EXPRESSION keeps the values); stores that hold chunks are
    marked as indexed before punctuation split words (indexed_config ''), so the rebuild sweep
    re-tokenises them in the background while they stay searchable."""

    dependencies = [
        ("stores", "0006_chunk_terms_by_chunk"),
    ]

    operations = [
        migrations.AddField(
            model_name="ragstore",
            name="index_config",
            field=models.CharField(default="simple", max_length=63),
        ),
        migrations.AddField(
            model_name="ragstore",
            name="indexed_config",
            field=models.CharField(blank=True, default="simple", max_length=63),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE chunks ALTER COLUMN tsv DROP EXPRESSION",
                    reverse_sql=(
                        "DROP INDEX IF EXISTS chunks_tsv_gin;"
                        " ALTER TABLE chunks DROP COLUMN tsv;"
                        " ALTER TABLE chunks ADD COLUMN tsv tsvector"
                        " GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, coalesce(content, ''))) STORED;"
                        " CREATE INDEX chunks_tsv_gin ON chunks USING gin (tsv);"
                    ),
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="chunk",
                    name="tsv",
                    field=django.contrib.postgres.search.SearchVectorField(null=True),
                ),
            ],
        ),
        migrations.RunSQL(
            "UPDATE rag_stores SET indexed_config = '' WHERE EXISTS (SELECT 1 FROM chunks WHERE store_id = rag_stores.id)",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
