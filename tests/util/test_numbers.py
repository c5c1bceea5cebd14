"""Numbers as people read them (snakeddp.util.numbers): sizes on disk."""

from snakeddp.util.numbers import disk_size


def test_a_size_is_scaled_to_its_bytes_in_powers_of_1000():
    """As `df -H` writes them: a kilobyte-sized checkpoints/ is not 0.0 of a larger unit, a 1000.0 never shows."""
    assert [disk_size(n) for n in (0, 999, 1000, 33_000, 999_949, 999_960, 1_234_567_890)] == [
        "0 B",
        "999 B",
        "1.0 kB",
        "33.0 kB",
        "999.9 kB",
        "1.0 MB",
        "1.2 GB",
    ]
    assert disk_size(5 * 10**15) == "5000.0 TB"
