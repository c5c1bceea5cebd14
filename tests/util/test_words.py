"""snakeddp.util.words: names written out in a sentence."""

from snakeddp.util.words import listed


def test_names_are_listed_with_the_conjunction_before_the_last():
    assert listed(["tensorboard"]) == "tensorboard"
    assert listed(["tensorboard", "wandb"]) == "tensorboard and wandb"
    assert listed(iter(["az://", "s3://", "gs://"]), "or") == "az://, s3:// or gs://"
