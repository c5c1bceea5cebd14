"""``model.name: cnn``: a small ResNet-style network for image columns.

A 3x3 convolution from the images' channels to ``model.width``, then ``model.depth`` stages of one residual
block each (two 3x3 convolutions with batch normalisation, the input added back: He et al.'s basic block);
every stage after the first doubles the channels and halves height and width. Global average pooling and a
linear layer give the class logits. Sized by the dataset's task: its ``input_shape`` [C, H, W], recorded by
the data stage for a table with an image column.
"""

from __future__ import annotations

import torch
from torch import nn


class Block(nn.Module):
    """Two 3x3 convolutions and a shortcut (a strided 1x1 convolution where the shape changes)."""

    def __init__(self, inputs: int, outputs: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(inputs, outputs, 3, stride=stride, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
            nn.ReLU(inplace=True),
            nn.Conv2d(outputs, outputs, 3, padding=1, bias=False),
            nn.BatchNorm2d(outputs),
        )
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or inputs != outputs:
            self.shortcut = nn.Sequential(
                nn.Conv2d(inputs, outputs, 1, stride=stride, bias=False), nn.BatchNorm2d(outputs)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet(channels: int, classes: int, width: int, depth: int) -> nn.Module:
    """The network: stem, ``depth`` stages, pooling, the linear head (``classes`` outputs)."""
    layers: list[nn.Module] = [
        nn.Conv2d(channels, width, 3, padding=1, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
    ]
    current = width
    for stage in range(depth):
        outputs = width * 2**stage
        layers.append(Block(current, outputs, stride=1 if stage == 0 else 2))
        current = outputs
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(current, classes)]
    return nn.Sequential(*layers)
