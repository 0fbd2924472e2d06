"""PromptSet.content_hash (trainer.digest.PromptDigest), computed for the sets already stored:
import_run then finds a stored set whose prompts a CLI run used."""

from django.db import migrations, models


def fill_content_hashes(apps, schema_editor):
    from trainer.digest import PromptDigest

    PromptSet = apps.get_model("experiments", "PromptSet")
    Prompt = apps.get_model("experiments", "Prompt")
    for ps in PromptSet.objects.filter(content_hash="").iterator():
        digest = PromptDigest()
        rows = Prompt.objects.filter(prompt_set_id=ps.pk).order_by("index").values_list(
            "text", "answer")
        for text, answer in rows.iterator(chunk_size=10_000):
            digest.add(text, answer)
        PromptSet.objects.filter(pk=ps.pk).update(content_hash=digest.hexdigest())


class Migration(migrations.Migration):
    dependencies = [("experiments", "0009_run_enqueued_at")]

    operations = [
        migrations.AddField(
            model_name="promptset", name="content_hash",
            field=models.CharField(blank=True, db_index=True, max_length=64),
        ),
        migrations.RunPython(fill_content_hashes, migrations.RunPython.noop),
    ]
