"""What a platform's job reads of its invocation's decisions (snakeddp.run.variables)."""

import json

from snakeddp.run import variables


def runs(*accelerators: str) -> dict:
    return {f"r{i}": {"config": {"launch": {"accelerator": a}}} for i, a in enumerate(accelerators)}


def test_a_site_is_settled_where_declared_where_no_run_waits_on_auto_and_in_a_job_by_its_invocations_decision():
    declared, bare = {"accelerator": "cpu", "gpu_type": None}, {"accelerator": None, "gpu_type": None}
    assert variables.settled_site(declared, runs("auto"), {}, deciding=True) == declared
    assert variables.settled_site(bare, runs("cpu", "gpu"), {}, deciding=True) == bare
    # Only the invocation asks its platform; a job takes what the invocation exported, or leaves auto undecided.
    assert variables.settled_site(bare, runs("cpu", "auto"), {}, deciding=True) is None
    exported = {variables.SITE: json.dumps({"accelerator": "gpu"})}
    assert variables.settled_site(bare, runs("auto"), exported, deciding=False) == {**bare, "accelerator": "gpu"}
    assert variables.settled_site(bare, runs("auto"), {}, deciding=False) == bare
