from django.db import migrations, models


class Migration(migrations.Migration):
    """Existing stores take the default, min-max score fusion, as main already fused that way."""

    dependencies = [
        ("stores", "0012_document_attributes"),
    ]

    operations = [
        migrations.AddField(
            model_name="ragstore",
            name="fusion",
            field=models.CharField(choices=[("scores", "Scores"), ("rrf", "Rrf")], default="scores", max_length=16),
        ),
    ]
