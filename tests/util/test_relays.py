"""The stops a job's top process holds from its first line (snakeddp.util.relays.hold): taken over in the order
they came, or let go to act as they would have (a real launcher's are tests/e2e/test_training.py's)."""

from __future__ import annotations

import signal

from snakeddp.util import relays


def test_stops_held_from_the_first_line_are_taken_over_in_order_or_let_go_to_act_as_they_would_have():
    handlers = {stop: signal.getsignal(stop) for stop in (signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP)}
    acted: list[int] = []
    try:
        signal.signal(signal.SIGHUP, signal.SIG_DFL)  # as a terminal's shell starts it (held too: with_hangup)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        relays.hold((signal.SIGTERM,))
        signal.raise_signal(signal.SIGHUP)
        signal.raise_signal(signal.SIGTERM)
        assert relays.take_held() == [signal.SIGHUP, signal.SIGTERM]  # not dead of either: noted
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and relays.take_held() == []

        # Let go (a process that sets no handlers of its own): each acts on the handler it had before the hold.
        signal.signal(signal.SIGUSR1, lambda signum, frame: acted.append(signum))
        ignored = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        relays.hold((signal.SIGUSR1, signal.SIGTERM))
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN  # `nohup`'s stays ignored
        signal.raise_signal(signal.SIGUSR1)
        assert acted == []
        relays.let_go()
        assert acted == [signal.SIGUSR1] and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
        signal.signal(signal.SIGTERM, ignored)
    finally:
        for stop, handler in handlers.items():
            signal.signal(stop, handler)
        relays._got.clear()  # what the held stops told the relays of this process
