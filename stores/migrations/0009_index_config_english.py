from django.db import migrations, models


class Migration(migrations.Migration):
    """New stores index in `english` (issue 16: stemming is what lifts the lexical leg above a
    naive BM25 on English collections). Existing stores keep the configuration they have: an
    upgrade does not change how they rank; an admin switches one with a lexical rebuild."""

    dependencies = [
        ("stores", "0008_chunk_terms_two_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="ragstore",
            name="index_config",
            field=models.CharField(default="english", max_length=63),
        ),
        migrations.AlterField(
            model_name="ragstore",
            name="indexed_config",
            field=models.CharField(blank=True, default="english", max_length=63),
        ),
    ]
