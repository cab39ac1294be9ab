import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("gateway", "0004_provider_type_labels"),
        ("stores", "0009_index_config_english"),
    ]

    operations = [
        migrations.AddField(
            model_name="ragstore",
            name="rerank_route",
            field=models.ForeignKey(
                blank=True,
                limit_choices_to={"kind": "rerank"},
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="rerank_stores",
                to="gateway.route",
            ),
        ),
    ]
