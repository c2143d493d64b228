"""The index of a task id after its day prefix (``task_ids.id_tail``): the dashboard's search
finds a task by what its pages show of the id with one range of this index per day partition,
not a condition per day (``task_partitions.id_search``). Partial: ids made before partitioning
have no day prefix and are searched by the primary key."""

import django.db.models.functions.text
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('mcptasks', '0016_partition_tasks'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name='task',
            index=models.Index(django.db.models.functions.text.Substr('id', 10), condition=models.Q(('id__gte', '~')), name='task_id_tail'),
        ),
    ]
