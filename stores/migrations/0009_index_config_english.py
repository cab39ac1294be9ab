from django.db import migrations, models

import stores.models


class Migration(migrations.Migration):
    """New stores index in the deployment's DEFAULT_INDEX_CONFIG, `english` unless set (issue 16:
    stemming is what lifts the lexical leg above a naive BM25 on English collections). Existing
    stores keep the configuration they have: an upgrade does not change how they rank; an admin
    switches one with a lexical rebuild."""

    dependencies = [
        ("stores", "0008_chunk_terms_two_indexes"),
    ]

    operations = [
        migrations.AlterField(
            model_name="ragstore",
            name="index_config",
            field=models.CharField(default=stores.models.default_index_config, max_length=63),
        ),
        migrations.AlterField(
            model_name="ragstore",
            name="indexed_config",
            field=models.CharField(blank=True, default=stores.models.default_index_config, max_length=63),
        ),
    ]
