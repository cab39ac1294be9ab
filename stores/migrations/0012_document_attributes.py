import django.contrib.postgres.indexes
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("stores", "0011_ocr"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="attributes",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddIndex(
            model_name="document",
            index=django.contrib.postgres.indexes.GinIndex(
                fields=["attributes"], name="documents_attributes", opclasses=["jsonb_path_ops"]
            ),
        ),
        migrations.AddIndex(
            model_name="document",
            index=django.contrib.postgres.indexes.GinIndex(fields=["tags"], name="documents_tags"),
        ),
    ]
