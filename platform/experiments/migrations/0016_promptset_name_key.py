"""PromptSet.name_key: the hash of the name's confusable skeleton, unique (issue 32). Sets
stored before whose names already look alike keep their names; the later ones get a key of
their own (the skeleton's hash with their id), so no new name may look like either."""

from django.db import migrations, models


def fill_keys(apps, schema_editor):
    from experiments.names import name_key

    PromptSet = apps.get_model("experiments", "PromptSet")
    seen = set()
    for ps in PromptSet.objects.order_by("pk").only("pk", "name"):
        key = name_key(ps.name)
        if key in seen:
            key = f"{key[:48]}#{ps.pk}"[:64]
        seen.add(key)
        PromptSet.objects.filter(pk=ps.pk).update(name_key=key)


class Migration(migrations.Migration):
    dependencies = [("experiments", "0015_sample_weight")]

    operations = [
        migrations.AddField(model_name="promptset", name="name_key",
                            field=models.CharField(max_length=64, default="")),
        migrations.RunPython(fill_keys, migrations.RunPython.noop),
        migrations.AlterField(model_name="promptset", name="name_key",
                              field=models.CharField(max_length=64, unique=True)),
    ]
