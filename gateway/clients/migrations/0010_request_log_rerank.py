from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("clients", "0009_request_log_route"),
    ]

    operations = [
        migrations.AddField(
            model_name="requestlog",
            name="rerank_tokens",
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AlterField(
            model_name="requestlog",
            name="endpoint",
            field=models.CharField(
                choices=[
                    ("chat", "Chat"),
                    ("retrieve", "Retrieve"),
                    ("embeddings", "Embeddings"),
                    ("rerank", "Rerank"),
                    ("models", "Models"),
                ],
                max_length=16,
            ),
        ),
    ]
