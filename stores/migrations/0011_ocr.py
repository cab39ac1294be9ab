import django.contrib.postgres.fields
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("stores", "0010_store_rerank_route"),
    ]

    operations = [
        migrations.AddField(
            model_name="ragstore",
            name="ocr",
            field=models.BooleanField(default=True),
        ),
        migrations.AddField(
            model_name="ragstore",
            name="ocr_language",
            field=models.CharField(default="eng", max_length=63),
        ),
        migrations.AddField(
            model_name="document",
            name="warnings",
            field=django.contrib.postgres.fields.ArrayField(
                base_field=models.TextField(), blank=True, default=list, size=None
            ),
        ),
        migrations.AddField(
            model_name="document",
            name="ocr_pages",
            field=models.PositiveIntegerField(default=0),
        ),
    ]
