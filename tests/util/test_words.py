"""snakeddp.util.words: names written out in a sentence."""

from snakeddp.util.words import counted, listed


def test_names_are_listed_with_the_conjunction_before_the_last():
    assert listed(["tensorboard"]) == "tensorboard"
    assert listed(["tensorboard", "wandb"]) == "tensorboard and wandb"
    assert listed(iter(["az://", "s3://", "gs://"]), "or") == "az://, s3:// or gs://"


def test_a_count_takes_its_nouns_number():
    """The report said "from 1 runs", "summed over 1 runs" and "1 epochs"."""
    assert [counted(n, "run") for n in (0, 1, 2)] == ["0 runs", "1 run", "2 runs"]
