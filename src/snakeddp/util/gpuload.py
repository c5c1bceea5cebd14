"""How busy a run's GPUs are, as NVML samples it (nvmlDeviceGetUtilizationRates: the share of the last sample
period, 1/6 s to 1 s by GPU, in which a kernel ran), for a try's account (snakeddp.run.account).

A daemon thread asks every ``every_s`` seconds, so that a GPU fallen off the bus, which blocks NVML's calls,
stalls the thread and never the training loop (util.gpus asks in a thread for the same reason). A GPU that
does not answer (a MIG slice: Not Supported) is left out; none answering gives no mean rather than 0.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence


class Utilisation:
    """The mean utilisation (%) of the GPUs with ``uuids`` over the samples taken so far; ``start``/``stop``."""

    def __init__(self, uuids: Sequence[str], every_s: float) -> None:
        self.uuids, self.every_s = list(uuids), every_s
        self.total, self.samples = 0.0, 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="snakeddp-gpu-load", daemon=True)

    def start(self) -> None:
        if self.uuids:
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()

    def mean(self) -> float | None:
        return round(self.total / self.samples, 1) if self.samples else None

    def _run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
        except (ImportError, OSError, AttributeError):
            return
        except Exception as error:  # pynvml.NVMLError, whose class exists only once pynvml imported
            if type(error).__name__.startswith("NVMLError"):
                return
            raise
        try:
            handles = [h for h in (self._handle(pynvml, uuid) for uuid in self.uuids) if h is not None]
            while handles and not self._stopped.is_set():
                self._sample(pynvml, handles)
                self._stopped.wait(self.every_s)
        finally:
            pynvml.nvmlShutdown()

    @staticmethod
    def _handle(pynvml, uuid: str):
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid)
        except pynvml.NVMLError:
            return None

    def _sample(self, pynvml, handles: list) -> None:
        rates = []
        for handle in handles:
            try:
                rates.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
            except pynvml.NVMLError:
                continue
        if rates:
            self.total += sum(rates) / len(rates)
            self.samples += 1
