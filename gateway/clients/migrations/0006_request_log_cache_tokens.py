from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('clients', '0005_spend_limits'),
    ]

    operations = [
        migrations.AddField(
            model_name='requestlog',
            name='cache_write_tokens',
            field=models.PositiveIntegerField(default=0),
        ),
        migrations.AddField(
            model_name='requestlog',
            name='cached_prompt_tokens',
            field=models.PositiveIntegerField(default=0),
        ),
    ]
