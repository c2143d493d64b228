"""The seal reads its chain by index, whatever the planner guesses (issue 23).

``audit_seal_events`` (0008) refuses a seq its chain already has with ``EXISTS (… WHERE chain =
c.chain AND seq >= c.first_seq)``. Planned without the values, that condition looked like a
sixth of the table, and an EXISTS over that many rows is cheapest, in the planner's eyes, as a
sequential scan that stops at the first match; in a good chain nothing matches, so each seal
read the whole partition: 1.1-1.2 s per call at 10,000,000 events (``bench/PROFILE-23.md``),
one call per sealing batch. With sequential scans off the check is one probe of each
partition's ``(chain, seq)`` index, as the duplicate-seq trigger's already is; JIT off too, which
the inflated estimate switched on (about 30 ms of compiling per call). 2-8 ms per call there now.
"""

from importlib import import_module

from django.db import migrations

_on_postgresql = import_module("audit.migrations.0003_append_only_trigger")._on_postgresql

SEAL = "audit_seal_events(bigint[], bigint[], varchar[], varchar[])"
FORWARD = f"ALTER FUNCTION {SEAL} SET enable_seqscan = off SET jit = off;"
BACKWARD = f"ALTER FUNCTION {SEAL} RESET enable_seqscan RESET jit;"


class Migration(migrations.Migration):
    dependencies = [
        ("audit", "0009_task_id_collation"),
    ]

    operations = [
        migrations.RunPython(_on_postgresql(FORWARD), _on_postgresql(BACKWARD), elidable=False),
    ]
