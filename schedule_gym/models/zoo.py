"""The model zoo: whole models in plain PyTorch, with random seeded weights.

| name               | model                                                             | input                    |
|--------------------|-------------------------------------------------------------------|--------------------------|
| ``resnet18``       | ResNet-18, torchvision's (11,689,512 parameters)                  | ``[1, 3, 224, 224]``     |
| ``resnet50``       | ResNet-50 v1.5, torchvision's (25,557,032 parameters)             | ``[1, 3, 224, 224]``     |
| ``mobilenetv2``    | MobileNet-V2 1.0, torchvision's (3,504,872 parameters)            | ``[1, 3, 224, 224]``     |
| ``bert-base``      | BERT-base encoder, post-norm: 12 layers, 12 heads, FFN 3072       | ``[1, 128, 768]`` floats |
| ``lstm-ptb``       | PTB "small" LSTM language model (Zaremba et al.), native cells    | ``[20, 20]`` token ids   |
| ``tiny-cnn``       | conv-bn-relu stem, a BasicBlock with a strided downsample, Linear | ``[1, 3, 32, 32]``       |
| ``tiny-mobilenet`` | stem conv, two inverted-residual blocks (one residual), Linear    | ``[1, 3, 32, 32]``       |
| ``tiny-bert``      | one BERT layer, hidden 64, 4 heads, FFN 128                       | ``[1, 16, 64]`` floats   |
| ``tiny-lstm``      | the PTB LSTM at vocabulary 50, hidden 16, 2 layers                | ``[3, 4]`` token ids     |
| ``tiny-mlp``       | Linear 32->64, ReLU, Linear 64->10                                | ``[4, 32]``              |

:func:`build_model` returns a :class:`ModelSpec`: the module in ``eval()`` mode and example inputs.
The tiny models are the full ones' classes built with smaller sizes (the builders :func:`resnet`,
:func:`mobilenet_v2`, :func:`bert`, :func:`lstm_lm` and :func:`mlp` take their sizes as keyword
arguments; ``build_model(name, seed, **sizes)`` passes them on, e.g. ``build_model("bert-base", layers=1)``).

Weights are random, drawn from ``torch.manual_seed(seed)`` inside ``torch.random.fork_rng`` (the
global RNG state is left as it was); the same seed gives the same weights and inputs. Batch norm
layers get non-trivial inference statistics (running mean ~ N(0, 0.1), running variance ~ U(0.5, 1.5),
weight ~ U(0.5, 1.5), bias ~ N(0, 0.1)), so folding batch norm into convolutions is actually exercised.
Convolutions use torchvision's initialisation (Kaiming normal, fan-out), the LSTM Zaremba et al.'s
(uniform in [-0.1, 0.1]); latency does not depend on the weights, only correctness checks see them.

Why not torchvision: its wheels link against a CUDA build of PyTorch, and with the CPU build installed
here ``import torchvision`` fails ("operator torchvision::nms does not exist"); nothing can be
downloaded either. The CNNs follow torchvision's definitions and module names (a torchvision
``state_dict`` loads into them), and the tests check their parameter counts against torchvision's.

Everything is written to export cleanly with ``torch.export`` and import into TVM Relax: no
``nn.MultiheadAttention`` / ``nn.TransformerEncoder`` (their fused fast paths export as operators TVM
cannot import), no ``nn.LSTM`` (the LSTM is written as native cells, the form the optimization-mapping
paper's Figure 2a starts from), no negative indices in slicing, pooling as ``x.mean((2, 3))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

__all__ = [
    "MODELS",
    "BasicBlock",
    "BertEncoder",
    "BertLayer",
    "Bottleneck",
    "InvertedResidual",
    "LSTMLanguageModel",
    "MLP",
    "MobileNetV2",
    "ModelSpec",
    "NativeLSTMCell",
    "ResNet",
    "bert",
    "build_model",
    "lstm_lm",
    "lstm_weights_as_torch",
    "mlp",
    "mobilenet_v2",
    "resnet",
]


@dataclass
class ModelSpec:
    """A model ready to run or export: ``module(*inputs)``; the module is in ``eval()`` mode."""

    name: str
    module: nn.Module
    inputs: tuple[torch.Tensor, ...]
    description: str


# ----------------------------------------------------------------------------------------------------
# ResNet (torchvision's BasicBlock / Bottleneck v1.5)


def _conv3x3(cin: int, cout: int, stride: int = 1, groups: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 3, stride=stride, padding=1, groups=groups, bias=False)


def _conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 conv-bn layers and a shortcut (a strided 1x1 conv-bn when the shape changes)."""

    expansion = 1

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carrying the stride: v1.5), 1x1 expand by 4; shortcut as in BasicBlock."""

    expansion = 4

    def __init__(self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None) -> None:
        super().__init__()
        self.conv1 = _conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ResNet with its sizes as arguments (the defaults are ResNet-18's).

    ``layers`` blocks per stage, ``widths`` the stages' planes, ``strides`` their first block's stride;
    the stem is a ``stem_kernel`` conv with stride ``stem_stride``, BN, ReLU and (``maxpool``) a 3x3/2
    max pool; the head a mean over the spatial dimensions and a Linear to ``num_classes``.
    """

    def __init__(self, block: type[BasicBlock] | type[Bottleneck] = BasicBlock,
                 layers: Sequence[int] = (2, 2, 2, 2), widths: Sequence[int] = (64, 128, 256, 512),
                 strides: Sequence[int] = (1, 2, 2, 2), stem_channels: int = 64, stem_kernel: int = 7,
                 stem_stride: int = 2, maxpool: bool = True, num_classes: int = 1000) -> None:
        super().__init__()
        if not len(layers) == len(widths) == len(strides):
            raise ValueError(f"layers {layers}, widths {widths} and strides {strides} differ in length")
        self.conv1 = nn.Conv2d(3, stem_channels, stem_kernel, stride=stem_stride, padding=stem_kernel // 2,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(stem_channels)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1) if maxpool else nn.Identity()
        self.inplanes = stem_channels
        for i, (n, planes, stride) in enumerate(zip(layers, widths, strides)):
            setattr(self, f"layer{i + 1}", self._make_layer(block, planes, n, stride))
        self.num_stages = len(layers)
        self.fc = nn.Linear(widths[-1] * block.expansion, num_classes)

    def _make_layer(self, block: Any, planes: int, blocks: int, stride: int) -> nn.Sequential:
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(_conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        out = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        out += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(self.num_stages):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(x.mean((2, 3)))


# ----------------------------------------------------------------------------------------------------
# MobileNet-V2 (torchvision's, width 1.0)


def _conv_bn_relu6(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    """torchvision's Conv2dNormActivation with ReLU6 (module names 0, 1, 2 as there)."""
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=(kernel - 1) // 2, groups=groups,
                                   bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU6())


class InvertedResidual(nn.Module):
    """1x1 expansion (when ``expand_ratio`` != 1), 3x3 depthwise with the stride, 1x1 linear projection;
    a residual when the stride is 1 and the channels stay the same."""

    def __init__(self, inp: int, oup: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = int(round(inp * expand_ratio))
        self.use_res_connect = stride == 1 and inp == oup
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_relu6(inp, hidden, kernel=1))
        layers += [_conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, oup, 1, bias=False), nn.BatchNorm2d(oup)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res_connect else self.conv(x)


#: torchvision's MobileNet-V2 blocks: (expand ratio t, channels c, repeats n, first stride s)
MOBILENET_V2_SETTING: tuple[tuple[int, int, int, int], ...] = (
    (1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


class MobileNetV2(nn.Module):
    """torchvision's MobileNetV2 (``features``, ``classifier``) with its sizes as arguments.

    ``setting`` as :data:`MOBILENET_V2_SETTING`; ``last_channel`` None leaves out the final 1x1
    conv. The classifier's Dropout is a no-op in eval mode and is left out (an ``nn.Identity`` keeps
    torchvision's ``classifier.1`` name for the Linear).
    """

    def __init__(self, setting: Sequence[tuple[int, int, int, int]] = MOBILENET_V2_SETTING,
                 stem_channels: int = 32, last_channel: int | None = 1280, num_classes: int = 1000) -> None:
        super().__init__()
        features: list[nn.Module] = [_conv_bn_relu6(3, stem_channels, stride=2)]
        cin = stem_channels
        for t, c, n, s in setting:
            for i in range(n):
                features.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        if last_channel is not None:
            features.append(_conv_bn_relu6(cin, last_channel, kernel=1))
            cin = last_channel
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Identity(), nn.Linear(cin, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x).mean((2, 3)))


# ----------------------------------------------------------------------------------------------------
# BERT encoder


class BertLayer(nn.Module):
    """One post-norm BERT layer: self-attention (Q, K, V, output Linears), residual + LayerNorm,
    FFN (Linear, exact GELU, Linear), residual + LayerNorm."""

    def __init__(self, hidden: int = 768, heads: int = 12, ffn: int = 3072, eps: float = 1e-12) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden size {hidden} is not a multiple of {heads} heads")
        self.heads, self.head_dim = heads, hidden // heads
        self.scale = float(math.sqrt(self.head_dim))
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, ffn)
        self.gelu = nn.GELU()  # the exact (erf) form, as BERT's
        self.output = nn.Linear(ffn, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape

        def split(y: torch.Tensor) -> torch.Tensor:  # [b, t, d] -> [b, heads, t, head_dim]
            return y.view(b, t, self.heads, self.head_dim).permute(0, 2, 1, 3)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = q @ k.transpose(-1, -2) / self.scale
        context = torch.softmax(scores, dim=-1) @ v
        context = context.permute(0, 2, 1, 3).reshape(b, t, d)
        x = self.attention_norm(x + self.attention_output(context))
        return self.output_norm(x + self.output(self.gelu(self.intermediate(x))))


class BertEncoder(nn.Module):
    """``layers`` :class:`BertLayer` on hidden states ``[batch, tokens, hidden]`` (no embeddings)."""

    def __init__(self, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072) -> None:
        super().__init__()
        self.layers = nn.ModuleList(BertLayer(hidden, heads, ffn) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


# ----------------------------------------------------------------------------------------------------
# LSTM language model (native cells)


class NativeLSTMCell(nn.Module):
    """An LSTM cell as the paper's Figure 2a: four input Linears (with bias) and four hidden Linears
    (no bias), one per gate, in PyTorch's ``nn.LSTM`` gate order i, f, g, o::

        i = sigmoid(x_i(x) + h_i(h))    f = sigmoid(x_f(x) + h_f(h))
        g = tanh(x_g(x) + h_g(h))       o = sigmoid(x_o(x) + h_o(h))
        c' = f * c + i * g              h' = o * tanh(c')
    """

    GATES = ("i", "f", "g", "o")

    def __init__(self, input_size: int, hidden: int) -> None:
        super().__init__()
        self.input_size, self.hidden = input_size, hidden
        self.x_i, self.x_f = nn.Linear(input_size, hidden), nn.Linear(input_size, hidden)
        self.x_g, self.x_o = nn.Linear(input_size, hidden), nn.Linear(input_size, hidden)
        self.h_i, self.h_f = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)
        self.h_g, self.h_o = nn.Linear(hidden, hidden, bias=False), nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i = torch.sigmoid(self.x_i(x) + self.h_i(h))
        f = torch.sigmoid(self.x_f(x) + self.h_f(h))
        g = torch.tanh(self.x_g(x) + self.h_g(h))
        o = torch.sigmoid(self.x_o(x) + self.h_o(h))
        c = f * c + i * g
        return o * torch.tanh(c), c

    def input_linears(self) -> list[nn.Linear]:
        return [self.x_i, self.x_f, self.x_g, self.x_o]

    def hidden_linears(self) -> list[nn.Linear]:
        return [self.h_i, self.h_f, self.h_g, self.h_o]


class LSTMLanguageModel(nn.Module):
    """Zaremba et al.'s PTB LSTM language model: token ids ``[batch, steps]`` -> Embedding ->
    ``num_layers`` stacked :class:`NativeLSTMCell` unrolled over the steps (a Python loop: unrolled
    by ``torch.export``; h and c start at zero) -> the top layer's outputs stacked along dim 1 ->
    Linear to the vocabulary: logits ``[batch, steps, vocab]``."""

    def __init__(self, vocab: int = 10000, hidden: int = 200, num_layers: int = 2) -> None:
        super().__init__()
        self.vocab, self.hidden, self.num_layers = vocab, hidden, num_layers
        self.embedding = nn.Embedding(vocab, hidden)
        self.cells = nn.ModuleList(NativeLSTMCell(hidden, hidden) for _ in range(num_layers))
        self.decoder = nn.Linear(hidden, vocab)

    def hidden_states(self, tokens: torch.Tensor) -> torch.Tensor:
        """The top layer's h at every step: ``[batch, steps, hidden]``."""
        batch, steps = tokens.shape
        x = self.embedding(tokens)
        h = [torch.zeros(batch, self.hidden) for _ in self.cells]
        c = [torch.zeros(batch, self.hidden) for _ in self.cells]
        outputs = []
        for t in range(steps):
            y = x[:, t]
            for k, cell in enumerate(self.cells):
                h[k], c[k] = cell(y, h[k], c[k])
                y = h[k]
            outputs.append(y)
        return torch.stack(outputs, dim=1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.hidden_states(tokens))


def lstm_weights_as_torch(module: LSTMLanguageModel) -> nn.LSTM:
    """An ``nn.LSTM(hidden, hidden, num_layers, batch_first=True)`` with ``module``'s cell weights:
    ``weight_ih_l{k}`` / ``bias_ih_l{k}`` the four input Linears' weights / biases concatenated in
    i, f, g, o order, ``weight_hh_l{k}`` the hidden Linears', ``bias_hh_l{k}`` zeros. Applied to
    ``module.embedding(tokens)`` it gives :meth:`LSTMLanguageModel.hidden_states`."""
    lstm = nn.LSTM(module.hidden, module.hidden, num_layers=module.num_layers, batch_first=True)
    with torch.no_grad():
        for k, cell in enumerate(module.cells):
            getattr(lstm, f"weight_ih_l{k}").copy_(torch.cat([m.weight for m in cell.input_linears()]))
            getattr(lstm, f"bias_ih_l{k}").copy_(torch.cat([m.bias for m in cell.input_linears()]))
            getattr(lstm, f"weight_hh_l{k}").copy_(torch.cat([m.weight for m in cell.hidden_linears()]))
            getattr(lstm, f"bias_hh_l{k}").zero_()
    return lstm.eval()


# ----------------------------------------------------------------------------------------------------
# MLP


class MLP(nn.Module):
    """Linear, ReLU, Linear."""

    def __init__(self, inputs: int = 32, hidden: int = 64, outputs: int = 10) -> None:
        super().__init__()
        self.fc1, self.relu, self.fc2 = nn.Linear(inputs, hidden), nn.ReLU(), nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.relu(self.fc1(x)))


# ----------------------------------------------------------------------------------------------------
# Builders: sizes as keyword arguments, weights and inputs from the seed


def _seeded(seed: int, make: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
            ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """``make()`` under ``torch.manual_seed(seed)``, the global RNG state restored afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module, inputs = make()
    return module.eval(), inputs


def _init_cnn(module: nn.Module) -> None:
    """torchvision's convolution init (Kaiming normal, fan-out); batch norm with non-trivial inference
    statistics and affine parameters, so that folding it into the convolutions changes something."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0.0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0.0, 0.1)


def resnet(depth: int = 18, *, seed: int = 0, batch: int = 1, image: int = 224, name: str | None = None,
           **sizes: Any) -> ModelSpec:
    """ResNet-``depth`` (18: BasicBlock [2, 2, 2, 2]; 34: BasicBlock [3, 4, 6, 3]; 50: Bottleneck
    [3, 4, 6, 3]; 101: Bottleneck [3, 4, 23, 3]) on ``[batch, 3, image, image]``; ``sizes`` override
    :class:`ResNet`'s arguments (``layers``, ``widths``, ``strides``, stem, ``num_classes``)."""
    configs = {18: (BasicBlock, (2, 2, 2, 2)), 34: (BasicBlock, (3, 4, 6, 3)),
               50: (Bottleneck, (3, 4, 6, 3)), 101: (Bottleneck, (3, 4, 23, 3))}
    if depth not in configs:
        raise ValueError(f"ResNet depth {depth}: known depths are {', '.join(map(str, configs))}")
    block, layers = configs[depth]
    kwargs = {"block": block, "layers": layers, **sizes}

    def make():
        module = ResNet(**kwargs)
        _init_cnn(module)
        return module, (torch.randn(batch, 3, image, image),)

    module, inputs = _seeded(seed, make)
    return ModelSpec(name or f"resnet{depth}", module, inputs,
                     f"ResNet-{depth} (torchvision's architecture, random weights), input {list(inputs[0].shape)}")


def mobilenet_v2(*, seed: int = 0, batch: int = 1, image: int = 224, name: str = "mobilenetv2",
                 **sizes: Any) -> ModelSpec:
    """MobileNet-V2 on ``[batch, 3, image, image]``; ``sizes`` override :class:`MobileNetV2`'s arguments."""

    def make():
        module = MobileNetV2(**sizes)
        _init_cnn(module)
        with torch.no_grad():  # torchvision: classifier ~ N(0, 0.01), bias 0
            nn.init.normal_(module.classifier[1].weight, 0.0, 0.01)
            nn.init.zeros_(module.classifier[1].bias)
        return module, (torch.randn(batch, 3, image, image),)

    module, inputs = _seeded(seed, make)
    return ModelSpec(name, module, inputs,
                     f"MobileNet-V2 (torchvision's architecture, random weights), input {list(inputs[0].shape)}")


def bert(*, layers: int = 12, hidden: int = 768, heads: int = 12, ffn: int = 3072, tokens: int = 128,
         batch: int = 1, seed: int = 0, name: str = "bert-base") -> ModelSpec:
    """A BERT encoder (:class:`BertEncoder`) on float hidden states ``[batch, tokens, hidden]``."""

    def make():
        module = BertEncoder(layers, hidden, heads, ffn)
        return module, (torch.randn(batch, tokens, hidden),)

    module, inputs = _seeded(seed, make)
    return ModelSpec(name, module, inputs,
                     f"BERT encoder: {layers} post-norm layer{'s' * (layers != 1)}, hidden {hidden}, {heads} heads, "
                     f"FFN {ffn}, on hidden states {list(inputs[0].shape)} (random weights)")


def lstm_lm(*, vocab: int = 10000, hidden: int = 200, num_layers: int = 2, steps: int = 20, batch: int = 20,
            init_scale: float = 0.1, seed: int = 0, name: str = "lstm-ptb") -> ModelSpec:
    """The PTB LSTM language model (:class:`LSTMLanguageModel`) on token ids ``[batch, steps]``; every
    parameter uniform in ``[-init_scale, init_scale]`` (Zaremba et al.'s init). The defaults are the
    "small" configuration: vocabulary 10000, hidden 200, 2 layers, 20 steps, batch 20."""

    def make():
        module = LSTMLanguageModel(vocab, hidden, num_layers)
        with torch.no_grad():
            for p in module.parameters():
                p.uniform_(-init_scale, init_scale)
        return module, (torch.randint(0, vocab, (batch, steps), dtype=torch.int64),)

    module, inputs = _seeded(seed, make)
    return ModelSpec(name, module, inputs,
                     f"PTB LSTM language model: {num_layers} layers of native cells (4+4 Linears each), hidden "
                     f"{hidden}, vocabulary {vocab}, {steps} steps, batch {batch} (random weights)")


def mlp(*, inputs: int = 32, hidden: int = 64, outputs: int = 10, batch: int = 4, seed: int = 0,
        name: str = "tiny-mlp") -> ModelSpec:
    """:class:`MLP` on ``[batch, inputs]``."""

    def make():
        return MLP(inputs, hidden, outputs), (torch.randn(batch, inputs),)

    module, example = _seeded(seed, make)
    return ModelSpec(name, module, example,
                     f"MLP: Linear {inputs}->{hidden}, ReLU, Linear {hidden}->{outputs}, input {[batch, inputs]}")


_TINY_CNN = {"layers": (1,), "widths": (16,), "strides": (2,), "stem_channels": 8, "stem_kernel": 3,
             "stem_stride": 1, "maxpool": False, "num_classes": 10}
# block 1: no expansion, depthwise stride 1, residual (8 -> 8); block 2: expansion 4, stride 2 (8 -> 16)
_TINY_MOBILENET = {"setting": ((1, 8, 1, 1), (4, 16, 1, 2)), "stem_channels": 8, "last_channel": None,
                   "num_classes": 10}

#: name -> (builder, its keyword arguments, one-line description)
_REGISTRY: dict[str, tuple[Callable[..., ModelSpec], dict[str, Any], str]] = {
    "resnet18": (resnet, {"depth": 18}, "ResNet-18 (torchvision's architecture), 1x3x224x224"),
    "resnet50": (resnet, {"depth": 50}, "ResNet-50 v1.5 (torchvision's architecture), 1x3x224x224"),
    "mobilenetv2": (mobilenet_v2, {}, "MobileNet-V2 1.0 (torchvision's architecture), 1x3x224x224"),
    "bert-base": (bert, {}, "BERT-base encoder (12 layers, hidden 768, 12 heads), hidden states 1x128x768"),
    "lstm-ptb": (lstm_lm, {}, "PTB small LSTM LM (2 layers, hidden 200, vocab 10000), native cells, 20x20 tokens"),
    "tiny-cnn": (resnet, {"depth": 18, "image": 32, **_TINY_CNN},
                 "conv-bn-relu stem, one BasicBlock with a strided downsample, Linear; 1x3x32x32"),
    "tiny-mobilenet": (mobilenet_v2, {"image": 32, **_TINY_MOBILENET},
                       "stem conv, two inverted-residual blocks (one with a residual), Linear; 1x3x32x32"),
    "tiny-bert": (bert, {"layers": 1, "hidden": 64, "heads": 4, "ffn": 128, "tokens": 16},
                  "one BERT layer, hidden 64, 4 heads, FFN 128; hidden states 1x16x64"),
    "tiny-lstm": (lstm_lm, {"vocab": 50, "hidden": 16, "num_layers": 2, "steps": 4, "batch": 3},
                  "the PTB LSTM LM at vocab 50, hidden 16, 2 layers, 4 steps, batch 3"),
    "tiny-mlp": (mlp, {}, "Linear 32->64, ReLU, Linear 64->10; 4x32"),
}

#: name -> one-line description of every model :func:`build_model` knows
MODELS: dict[str, str] = {name: description for name, (_, _, description) in _REGISTRY.items()}


def build_model(name: str, seed: int = 0, **sizes: Any) -> ModelSpec:
    """The zoo model ``name`` (see :data:`MODELS`) with weights and inputs from ``seed``.

    ``sizes`` override the builder's keyword arguments, e.g. ``build_model("bert-base", layers=1)``.

    >>> spec = build_model("tiny-mlp")
    >>> spec.module(*spec.inputs).shape
    torch.Size([4, 10])
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)}")
    builder, kwargs, description = _REGISTRY[name]
    spec = builder(**{**kwargs, **sizes}, seed=seed, name=name)
    if not sizes:
        spec.description = description
    return spec
