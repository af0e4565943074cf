"""The model zoo: whole models in plain PyTorch, with random seeded weights.

| name                | model                                                                    | input                    |
|---------------------|--------------------------------------------------------------------------|--------------------------|
| ``resnet18``        | ResNet-18, torchvision's (11,689,512 parameters)                         | ``[1, 3, 224, 224]``     |
| ``resnet50``        | ResNet-50 v1.5, torchvision's (25,557,032 parameters)                    | ``[1, 3, 224, 224]``     |
| ``mobilenetv2``     | MobileNet-V2 1.0, torchvision's (3,504,872 parameters)                   | ``[1, 3, 224, 224]``     |
| ``bert-base``       | BERT-base encoder, post-norm: 12 layers, 12 heads, FFN 3072              | ``[1, 128, 768]`` floats |
| ``lstm-ptb``        | PTB "small" LSTM language model (Zaremba et al.), native cells           | ``[20, 20]`` token ids   |
| ``vgg16``           | VGG-16 without batch norm, torchvision's (138,357,544 parameters)        | ``[1, 3, 224, 224]``     |
| ``inceptionv3``     | Inception-v3, torchvision's (27,161,264 with the auxiliary classifier)   | ``[1, 3, 299, 299]``     |
| ``densenet121``     | DenseNet-121, torchvision's (7,978,856 parameters)                       | ``[1, 3, 224, 224]``     |
| ``efficientnet-b0`` | EfficientNet-B0, torchvision's (5,288,548 parameters)                    | ``[1, 3, 224, 224]``     |
| ``vit-b16``         | ViT-B/16, torchvision's (86,567,656 parameters)                          | ``[1, 3, 224, 224]``     |
| ``gpt2``            | GPT-2 small with its embeddings and tied LM head (124,439,808)           | ``[1, 128]`` token ids   |
| ``resnext50``       | ResNeXt-50 32x4d, torchvision's (25,028,904 parameters)                  | ``[1, 3, 224, 224]``     |
| ``bert-tiny``       | BERT-tiny encoder: 2 layers, hidden 128, 2 heads, FFN 512                | ``[1, 128, 128]`` floats |
| ``tiny-cnn``        | conv-bn-relu stem, a BasicBlock with a strided downsample, Linear        | ``[1, 3, 32, 32]``       |
| ``tiny-mobilenet``  | stem conv, two inverted-residual blocks (one residual), Linear           | ``[1, 3, 32, 32]``       |
| ``tiny-bert``       | one BERT layer, hidden 64, 4 heads, FFN 128                              | ``[1, 16, 64]`` floats   |
| ``tiny-lstm``       | the PTB LSTM at vocabulary 50, hidden 16, 2 layers                       | ``[3, 4]`` token ids     |
| ``tiny-mlp``        | Linear 32->64, ReLU, Linear 64->10                                       | ``[4, 32]``              |
| ``tiny-vgg``, ``tiny-inception``, ``tiny-densenet``, ``tiny-efficientnet``, ``tiny-vit``, ``tiny-gpt2``, ``tiny-resnext`` | the networks above built small (:data:`MODELS` says how) | |

:func:`build_model` returns a :class:`ModelSpec`: the module in ``eval()`` mode and example inputs.
The tiny models are the full ones' classes built with smaller sizes (every builder takes its sizes
as keyword arguments; ``build_model(name, seed, **sizes)`` passes them on, e.g.
``build_model("bert-base", layers=1)``). One module per family: :mod:`.resnets` (ResNet, ResNeXt),
:mod:`.mobilenets`, :mod:`.efficientnets`, :mod:`.vggs`, :mod:`.inceptions`, :mod:`.densenets`,
:mod:`.berts`, :mod:`.vits`, :mod:`.gpts` (the last three share :mod:`.attention`), :mod:`.recurrent`
(the LSTM), :mod:`.mlps`; :mod:`.registry` holds the names.

Weights are random, drawn from ``torch.manual_seed(seed)`` inside ``torch.random.fork_rng`` (the
global RNG state is left as it was); the same seed gives the same weights and inputs. Batch norm
layers get non-trivial inference statistics (running mean ~ N(0, 0.1), running variance ~ U(0.5, 1.5),
weight ~ U(0.5, 1.5), bias ~ N(0, 0.1)), so folding batch norm into convolutions is actually exercised.
Convolutions use Kaiming normal, fan-out (torchvision's for ResNet, MobileNet, VGG and EfficientNet), or
fan-in for DenseNet (torchvision's) and Inception-v3 (whose own truncated normal, std 0.1, overflows with
random batch norm statistics); the classifiers their torchvision initialisation, the LSTM Zaremba et al.'s
(uniform in [-0.1, 0.1]), GPT-2 its own (N(0, 0.02)), ViT PyTorch's defaults; latency does not depend on
the weights, only correctness checks see them.

Why not torchvision: its wheels link against a CUDA build of PyTorch, and with the CPU build installed
here ``import torchvision`` fails ("operator torchvision::nms does not exist"); nothing can be
downloaded either. The CNNs follow torchvision's definitions and module names (a torchvision
``state_dict`` loads into them), and the tests check their parameter counts against torchvision's.

Everything is written to export cleanly with ``torch.export`` and import into TVM Relax: no
``nn.MultiheadAttention`` / ``nn.TransformerEncoder`` (their fused fast paths export as operators TVM
cannot import; attention is written out, :mod:`.attention`), no ``nn.LSTM`` (the LSTM is written as
native cells, the form the optimization-mapping paper's Figure 2a starts from), no negative indices in
slicing, global pooling as ``x.mean((2, 3))``, no Dropout (a no-op in eval mode).
"""

from schedule_gym.models.zoo.base import ModelSpec
from schedule_gym.models.zoo.berts import BertEncoder, BertLayer, bert
from schedule_gym.models.zoo.densenets import DenseNet, densenet
from schedule_gym.models.zoo.efficientnets import EfficientNet, MBConv, efficientnet
from schedule_gym.models.zoo.gpts import GPT2, gpt2
from schedule_gym.models.zoo.inceptions import Inception3, inception_v3
from schedule_gym.models.zoo.mlps import MLP, mlp
from schedule_gym.models.zoo.mobilenets import MOBILENET_V2_SETTING, InvertedResidual, MobileNetV2, mobilenet_v2
from schedule_gym.models.zoo.recurrent import LSTMLanguageModel, NativeLSTMCell, lstm_lm, lstm_weights_as_torch
from schedule_gym.models.zoo.registry import MODELS, NETWORKS, TENSET_TEST_NETWORKS, build_model
from schedule_gym.models.zoo.resnets import BasicBlock, Bottleneck, ResNet, resnet, resnext
from schedule_gym.models.zoo.vggs import VGG, vgg
from schedule_gym.models.zoo.vits import VisionTransformer, vit

__all__ = [
    "GPT2",
    "MLP",
    "MOBILENET_V2_SETTING",
    "MODELS",
    "NETWORKS",
    "TENSET_TEST_NETWORKS",
    "VGG",
    "BasicBlock",
    "BertEncoder",
    "BertLayer",
    "Bottleneck",
    "DenseNet",
    "EfficientNet",
    "Inception3",
    "InvertedResidual",
    "LSTMLanguageModel",
    "MBConv",
    "MobileNetV2",
    "ModelSpec",
    "NativeLSTMCell",
    "ResNet",
    "VisionTransformer",
    "bert",
    "build_model",
    "densenet",
    "efficientnet",
    "gpt2",
    "inception_v3",
    "lstm_lm",
    "lstm_weights_as_torch",
    "mlp",
    "mobilenet_v2",
    "resnet",
    "resnext",
    "vgg",
    "vit",
]
