"""snakeddp.compat.lightning: the shim that hands SIGTERM to Preemption, applied to one trainer only, and the
answer for local checkpoint paths that imports no object-storage package. Its refusal of Lightning releases it was
not written for is tests/compat/test_compat.py's."""

import ast
import subprocess
import sys

import lightning.pytorch as pl
from fsspec.implementations.local import LocalFileSystem

from snakeddp.compat.lightning import hand_sigterm_to_preemption
from tests.helpers import subprocess_env


def test_drops_the_per_step_broadcast_and_the_notifier_of_this_trainer_only():
    trainer, other = pl.Trainer(logger=False), pl.Trainer(logger=False)
    hand_sigterm_to_preemption(trainer)
    assert trainer.fit_loop.epoch_loop._broadcast_sigterm_tensor() is None
    assert trainer._signal_connector._sigterm_notifier_fn(15, None) is None
    assert not trainer.received_sigterm
    assert other.fit_loop.epoch_loop._broadcast_sigterm_tensor.__func__.__module__.startswith("lightning")


# A tiny fit with a local checkpoint directory, in a fresh interpreter where adlfs, gcsfs and s3fs are installed
# (the dev venv has all three); it prints which of them got imported.
FIT = """
import sys
import lightning.pytorch as pl
from lightning.pytorch.demos.boring_classes import BoringModel
if sys.argv[1] == "snakeddp":
    import snakeddp.compat.lightning
trainer = pl.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False,
                     enable_progress_bar=False, enable_model_summary=False, default_root_dir=sys.argv[2])
trainer.fit(BoringModel())
assert list(__import__("pathlib").Path(sys.argv[2]).rglob("*.ckpt")), "a checkpoint was saved"
print(sorted(name for name in ("adlfs", "gcsfs", "s3fs") if name in sys.modules))
"""


def test_a_fit_with_local_checkpoints_imports_no_object_storage_package_and_object_storage_is_still_told(tmp_path):
    def fit(shim: str) -> list[str]:
        argv = [sys.executable, "-c", FIT, shim, str(tmp_path / shim)]
        done = subprocess.run(argv, capture_output=True, text=True, env=subprocess_env(), timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        return ast.literal_eval(done.stdout.strip().splitlines()[-1])

    assert fit("lightning") == ["adlfs", "gcsfs", "s3fs"], "Lightning alone imports all three"
    assert fit("snakeddp") == []

    # Asked of a file system of theirs (fsspec imports its package for the URL), the answer is Lightning's.
    from fsspec.core import url_to_fs

    from snakeddp.compat.lightning import cloud_io

    s3, _ = url_to_fs("s3://bucket/checkpoints", anon=True)
    assert cloud_io._is_object_storage(s3) is True
    assert cloud_io._is_object_storage(LocalFileSystem()) is False
