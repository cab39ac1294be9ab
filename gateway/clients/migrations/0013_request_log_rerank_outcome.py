from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clients", "0012_usage_top_up"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="rerank_outcome",
            field=models.CharField(
                blank=True,
                choices=[("reranked", "Reranked"), ("skipped", "Skipped"), ("fallback", "Fallback")],
                default="",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="requestlog",
            name="rerank_reason",
            field=models.CharField(blank=True, default="", max_length=512),
        ),
    ]
