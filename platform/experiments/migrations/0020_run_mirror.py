from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('experiments', '0019_sample_reward_components'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='mirror_state',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
