"""The zoo's PyTorch networks: torchvision and Hugging Face transformers architectures and recurrent
networks of torch.nn layers (a BiLSTM tagger, a GRU acoustic model, a CRNN), random weights.

Only the generator (a child process) imports this module, so the test process never loads torch.
torchvision's package init loads its compiled ops, which the registry's build cannot load beside the
CPU torch; its model definitions are plain Python and need none of them, so they are imported from
the installed package without running that init (`_torchvision_models`).

Random weights are made to give outputs with real spread: every parameter that init left constant
(norm scales of 1, biases of 0) is perturbed, and batch-norm statistics are calibrated on random
batches, so a wrong kernel cannot hide behind an output that is ~0 everywhere.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from tests.zoo.catalog import QUANTIZED, QUANTIZED_7BIT


@dataclass(frozen=True)
class Network:
    """A module ready to export, its example inputs (export shapes) and the inputs to test with."""

    module: nn.Module
    inputs: dict[str, torch.Tensor]
    outputs: tuple[str, ...]
    dynamic_axes: dict[str, dict[int, str]] = field(default_factory=dict)
    """Which input and output dims are dynamic when exported with dynamic axes (name -> {dim: label})."""
    test_inputs: dict[str, np.ndarray] | None = None
    """Inputs to compare with (other shapes than the export's, for a dynamic export); None: `inputs`."""


def _torchvision_without_its_ops() -> None:
    """Register torchvision as a bare package (its submodules importable, its init not run); before
    transformers is imported too, which imports torchvision when it is installed."""
    if "torchvision" in sys.modules:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    package = types.ModuleType("torchvision")
    package.__path__ = list(spec.submodule_search_locations)
    package.__spec__ = spec
    sys.modules["torchvision"] = package


_torchvision_without_its_ops()


def _torchvision_models() -> types.ModuleType:
    import torchvision.models

    return torchvision.models


def _spread(module: nn.Module, generator: torch.Generator) -> None:
    """Perturb every constant-valued parameter and buffer of float dtype (norm scales, zero biases)."""
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if not tensor.is_floating_point() or tensor.numel() < 2 or "running_" in name:
                continue
            flat = tensor.reshape(-1)
            if bool(torch.all(flat == flat[0])):
                noise = torch.randn(tensor.shape, generator=generator) * 0.1
                tensor.add_(noise * (abs(float(flat[0])) if float(flat[0]) != 0 else 1.0))


def _calibrate_batch_norm(module: nn.Module, make_batch: Callable[[], torch.Tensor], rounds: int = 4) -> None:
    norms = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the calibration batches
    module.train()
    with torch.no_grad():
        for _ in range(rounds):
            module(make_batch())
    module.eval()


def _vision(
    build: Callable[[], nn.Module],
    size: int = 224,
    batch: int = 1,
    outputs: tuple[str, ...] = ("logits",),
    frames: int = 0,
) -> Callable[[int], Network]:
    """An image network (a video one with `frames`: [N, 3, frames, size, size])."""
    plane = (3, frames, size, size) if frames else (3, size, size)

    def make(seed: int) -> Network:
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        module = build().eval()
        _spread(module, generator)
        _calibrate_batch_norm(module, lambda: torch.randn(4, *plane, generator=generator))
        image = torch.randn(batch, *plane, generator=generator)
        test = np.random.default_rng(seed).standard_normal((2, *plane)).astype(np.float32)
        axes = {"image": {0: "batch"}, **{name: {0: "batch"} for name in outputs}}
        return Network(module, {"image": image}, outputs, axes, {"image": test})

    return make


class _FirstOutput(nn.Module):
    """Networks that return a dict or a tuple, reduced to the tensor the zoo compares; inputs are passed
    by keyword when named (transformers models differ in the order of their optional inputs)."""

    def __init__(self, inner: nn.Module, key: str | int, names: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.inner = inner
        self.key = key
        self.names = names

    def forward(self, *args: Any) -> torch.Tensor:
        if self.names:
            return self.inner(**dict(zip(self.names, args, strict=True)))[self.key]
        return self.inner(*args)[self.key]


def torchvision_builders() -> dict[str, Callable[[int], Network]]:
    """Every torchvision network of the zoo by name."""

    def tv(name: str, **kwargs: Any) -> Callable[[], nn.Module]:
        return lambda: getattr(_torchvision_models(), name)(weights=None, **kwargs)

    def video(name: str) -> Callable[[], nn.Module]:
        def build() -> nn.Module:
            _torchvision_models()
            import torchvision.models.video as clips

            return getattr(clips, name)(weights=None)  # type: ignore[no-any-return]

        return build

    def segmentation(name: str) -> Callable[[], nn.Module]:
        def build() -> nn.Module:
            models = _torchvision_models()
            import torchvision.models.segmentation as seg

            del models
            return _FirstOutput(getattr(seg, name)(weights=None, weights_backbone=None, num_classes=5), "out")

        return build

    return {
        "resnet50": _vision(tv("resnet50")),
        "resnet18": _vision(tv("resnet18")),
        "mobilenet_v2": _vision(tv("mobilenet_v2")),
        "mobilenet_v3_large": _vision(tv("mobilenet_v3_large")),
        "mobilenet_v3_small": _vision(tv("mobilenet_v3_small")),
        "efficientnet_b0": _vision(tv("efficientnet_b0")),
        "convnext_tiny": _vision(tv("convnext_tiny")),
        "regnet_y_400mf": _vision(tv("regnet_y_400mf")),
        "shufflenet_v2_x1_0": _vision(tv("shufflenet_v2_x1_0")),
        "densenet121": _vision(tv("densenet121")),
        "squeezenet1_1": _vision(tv("squeezenet1_1")),
        "googlenet": _vision(tv("googlenet", aux_logits=False, init_weights=True)),
        "inception_v3": _vision(tv("inception_v3", aux_logits=False, init_weights=True), size=299),
        "mnasnet0_5": _vision(tv("mnasnet0_5")),
        "vit_b_16": _vision(tv("vit_b_16")),
        "swin_t": _vision(tv("swin_t")),
        "lraspp_mobilenet_v3": _vision(segmentation("lraspp_mobilenet_v3_large"), size=256, outputs=("out",)),
        "fcn_resnet50": _vision(segmentation("fcn_resnet50"), size=224, outputs=("out",)),
        "vgg11": _vision(tv("vgg11")),  # a Gemm's weight of 25088 x 4096, past the folding limit
        # atrous convs of rates 12, 24 and 36 over a 14x14 plane
        "deeplabv3_mobilenet_v3": _vision(segmentation("deeplabv3_mobilenet_v3_large"), outputs=("out",)),
        # a video classifier: 3-D convs (3x3x3, strided 1x1x1) and batch norm over 8 frames of 112x112
        "r3d_18": _vision(video("r3d_18"), size=112, frames=8),
    }


def _text(
    build: Callable[[], nn.Module],
    vocab: int,
    *,
    seq: int = 16,
    mask: bool = True,
    outputs: tuple[str, ...] = ("hidden",),
) -> Callable[[int], Network]:
    """A text encoder called as module(input_ids, attention_mask): batch and sequence dynamic."""

    def make(seed: int) -> Network:
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        module = _FirstOutput(build().eval(), 0, ("input_ids", "attention_mask") if mask else ("input_ids",))
        _spread(module, generator)
        rng = np.random.default_rng(seed)

        def feeds(batch: int, length: int) -> dict[str, np.ndarray]:
            ids = rng.integers(0, vocab, (batch, length), dtype=np.int64)
            result = {"input_ids": ids}
            if mask:
                attention = np.ones((batch, length), dtype=np.int64)
                attention[-1, length - length // 4 :] = 0  # the last sequence is padded
                result["attention_mask"] = attention
            return result

        export = {name: torch.from_numpy(value) for name, value in feeds(1, seq).items()}
        axes = {name: {0: "batch", 1: "sequence"} for name in export}
        axes.update({name: {0: "batch", 1: "sequence"} for name in outputs})
        return Network(module, export, outputs, axes, feeds(2, seq - 4))

    return make


def _pixels(build: Callable[[], nn.Module], size: int, channels: int = 3) -> Callable[[int], Network]:
    def make(seed: int) -> Network:
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        module = _FirstOutput(build().eval(), 0)
        _spread(module, generator)
        pixels = torch.randn(1, channels, size, size, generator=generator)
        test = np.random.default_rng(seed).standard_normal((2, channels, size, size)).astype(np.float32)
        axes = {"pixel_values": {0: "batch"}, "hidden": {0: "batch"}}
        return Network(module, {"pixel_values": pixels}, ("hidden",), axes, {"pixel_values": test})

    return make


def _audio(build: Callable[[], nn.Module], mels: int, frames: int) -> Callable[[int], Network]:
    def make(seed: int) -> Network:
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        module = _FirstOutput(build().eval(), 0)
        _spread(module, generator)
        features = torch.randn(1, mels, frames, generator=generator)
        test = np.random.default_rng(seed).standard_normal((2, mels, frames)).astype(np.float32)
        axes = {"input_features": {0: "batch"}, "hidden": {0: "batch"}}
        return Network(module, {"input_features": features}, ("hidden",), axes, {"input_features": test})

    return make


def _waveform(build: Callable[[], nn.Module], samples: int) -> Callable[[int], Network]:
    """A speech encoder called on raw audio (batch, samples): its first conv has one input channel."""

    def make(seed: int) -> Network:
        torch.manual_seed(seed)
        generator = torch.Generator().manual_seed(seed)
        module = _FirstOutput(build().eval(), 0)
        _spread(module, generator)
        audio = torch.randn(1, samples, generator=generator)
        test = np.random.default_rng(seed).standard_normal((2, samples)).astype(np.float32)
        axes = {"input_values": {0: "batch"}, "hidden": {0: "batch"}}
        return Network(module, {"input_values": audio}, ("hidden",), axes, {"input_values": test})

    return make


def transformers_builders() -> dict[str, Callable[[int], Network]]:
    """Every transformers network of the zoo by name: small configs of the real architectures."""
    import transformers as tf

    small = {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 256}

    def bert() -> nn.Module:
        return tf.BertModel(tf.BertConfig(vocab_size=1000, **small), add_pooling_layer=False)

    def bert_eager() -> nn.Module:  # attention as plain MatMul/Softmax: what exports before opset 14 hold
        config = tf.BertConfig(vocab_size=1000, **small, attn_implementation="eager")
        return tf.BertModel(config, add_pooling_layer=False)

    def distilbert() -> nn.Module:
        config = tf.DistilBertConfig(vocab_size=1000, dim=128, n_layers=2, n_heads=4, hidden_dim=256)
        return tf.DistilBertModel(config)

    def roberta() -> nn.Module:
        return tf.RobertaModel(tf.RobertaConfig(vocab_size=1000, **small), add_pooling_layer=False)

    def gpt2() -> nn.Module:
        config = tf.GPT2Config(
            vocab_size=1000, n_embd=128, n_layer=2, n_head=4, use_cache=False, bos_token_id=0, eos_token_id=0
        )
        return tf.GPT2Model(config)

    def t5_encoder() -> nn.Module:
        config = tf.T5Config(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4)
        return tf.T5EncoderModel(config)

    def clip_text() -> nn.Module:
        config = tf.CLIPTextConfig(vocab_size=1000, **small, max_position_embeddings=64)
        return tf.CLIPTextModel(config)

    def clip_vision() -> nn.Module:
        config = tf.CLIPVisionConfig(**small, image_size=64, patch_size=16)
        return tf.CLIPVisionModel(config)

    def vit() -> nn.Module:
        config = tf.ViTConfig(**small, image_size=64, patch_size=16)
        return tf.ViTModel(config, add_pooling_layer=False)

    def whisper_encoder() -> nn.Module:
        config = tf.WhisperConfig(
            d_model=128,
            encoder_layers=2,
            encoder_attention_heads=4,
            encoder_ffn_dim=256,
            decoder_layers=1,
            decoder_attention_heads=4,
            decoder_ffn_dim=256,
            num_mel_bins=40,
            max_source_positions=50,
        )
        return tf.WhisperModel(config).get_encoder()

    def beit() -> nn.Module:  # relative position bias: an index built by shape math on scalars
        config = tf.BeitConfig(**small, image_size=64, patch_size=16, use_relative_position_bias=True)
        return tf.BeitModel(config, add_pooling_layer=False)

    def poolformer() -> nn.Module:  # GroupNorm of one group: one statistic over each whole sample
        return tf.PoolFormerModel(tf.PoolFormerConfig(depths=[1, 1, 1, 1]))

    def wav2vec2() -> nn.Module:  # convs over the waveform, GroupNorm, a grouped positional conv
        config = tf.Wav2Vec2Config(
            **small,
            conv_dim=(32, 32, 32),
            conv_stride=(5, 2, 2),
            conv_kernel=(10, 3, 3),
            num_conv_pos_embeddings=16,
            num_conv_pos_embedding_groups=4,
        )
        return tf.Wav2Vec2Model(config)

    return {
        "bert": _text(bert, 1000),
        "bert_eager": _text(bert_eager, 1000),
        "distilbert": _text(distilbert, 1000),
        "roberta": _text(roberta, 1000),
        "gpt2": _text(gpt2, 1000),
        "t5_encoder": _text(t5_encoder, 1000),
        "clip_text": _text(clip_text, 1000),
        "clip_vision": _pixels(clip_vision, 64),
        "vit_hf": _pixels(vit, 64),
        "whisper_encoder": _audio(whisper_encoder, 40, 100),
        "beit": _pixels(beit, 64),
        "poolformer": _pixels(poolformer, 64),
        "wav2vec2": _waveform(wav2vec2, 4000),
    }


class _Tagger(nn.Module):
    """A BiLSTM sequence tagger: token embeddings, two bidirectional LSTM layers, a per-token classifier."""

    def __init__(self, vocab: int = 1000, dim: int = 128, hidden: int = 192, tags: int = 24) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.lstm = nn.LSTM(dim, hidden, num_layers=2, bidirectional=True, batch_first=True)
        self.out = nn.Linear(2 * hidden, tags)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.embed(ids))[0])


class _SpeechGRU(nn.Module):
    """A DeepSpeech2-style acoustic model: a strided conv over mel frames, GRUs, per-frame logits."""

    def __init__(self, mels: int = 40, width: int = 160, symbols: int = 30) -> None:
        super().__init__()
        self.conv = nn.Sequential(
            nn.Conv1d(mels, width, 5, stride=2, padding=2), nn.BatchNorm1d(width), nn.ReLU()
        )
        self.gru = nn.GRU(width, width, num_layers=2, batch_first=True)
        self.out = nn.Linear(width, symbols)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        frames = self.conv(features).transpose(1, 2)
        return self.out(self.gru(frames)[0])


class _CRNN(nn.Module):
    """A CRNN text-line recognizer: a conv stack reduces a 32-pixel-high line to one column per position,
    a bidirectional LSTM reads the columns, a classifier gives CTC logits."""

    def __init__(self, symbols: int = 40) -> None:
        super().__init__()

        def block(cin: int, cout: int, pool: tuple[int, int]) -> list[nn.Module]:
            return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool)]

        self.features = nn.Sequential(
            *block(1, 32, (2, 2)),
            *block(32, 64, (2, 2)),
            *block(64, 128, (2, 1)),
            nn.Conv2d(128, 128, (4, 1)),
        )
        self.lstm = nn.LSTM(128, 128, bidirectional=True, batch_first=True)
        self.out = nn.Linear(256, symbols)

    def forward(self, line: torch.Tensor) -> torch.Tensor:
        columns = self.features(line).squeeze(2).transpose(1, 2)  # [batch, width / 4, 128]
        return self.out(self.lstm(columns)[0])


def _recurrent(
    build: Callable[[], nn.Module], name: str, example: Callable[[np.random.Generator, int], np.ndarray]
) -> Callable[[int], Network]:
    """A recurrent network over one input `name`, exported at batch 1 (batch dynamic), tested at batch 2."""

    def make(seed: int) -> Network:
        torch.manual_seed(seed)
        module = build().eval()
        generator = torch.Generator().manual_seed(seed)
        _spread(module, generator)
        rng = np.random.default_rng(seed)
        _calibrate_batch_norm(module, lambda: torch.from_numpy(example(rng, 4)))
        axes = {name: {0: "batch"}, "output": {0: "batch"}}
        inputs = {name: torch.from_numpy(example(rng, 1))}
        return Network(module, inputs, ("output",), axes, {name: example(rng, 2)})

    return make


def recurrent_builders() -> dict[str, Callable[[int], Network]]:
    """The zoo's recurrent networks, built from torch.nn's LSTM and GRU layers."""
    return {
        "lstm_tagger": _recurrent(
            _Tagger, "input_ids", lambda rng, b: rng.integers(0, 1000, (b, 32), np.int64)
        ),
        "gru_speech": _recurrent(
            _SpeechGRU, "features", lambda rng, b: rng.standard_normal((b, 40, 100)).astype(np.float32)
        ),
        "crnn": _recurrent(
            _CRNN, "line", lambda rng, b: rng.standard_normal((b, 1, 32, 128)).astype(np.float32)
        ),
    }


def _half(make: Callable[[int], Network]) -> Callable[[int], Network]:
    """The network with float16 weights and inputs: what a half-precision export holds."""

    def make_half(seed: int) -> Network:
        network = make(seed)
        inputs = {k: v.half() if v.is_floating_point() else v for k, v in network.inputs.items()}
        tests = network.test_inputs and {
            k: v.astype(np.float16) if v.dtype == np.float32 else v for k, v in network.test_inputs.items()
        }
        return Network(network.module.half(), inputs, network.outputs, network.dynamic_axes, tests)

    return make_half


def builders() -> dict[str, Callable[[int], Network]]:
    everything = {**torchvision_builders(), **transformers_builders(), **recurrent_builders()}
    # a quantized network is its float network, quantized after export (tests/zoo/generate.py)
    return {
        **everything,
        **{f"{name}_fp16": _half(everything[name]) for name in FLOAT16},
        **{f"{name}{QUANTIZED}": everything[name] for name in QDQ},
        **{f"{name}{QUANTIZED_7BIT}": everything[name] for name in QDQ},
    }


FLOAT16 = ("resnet18", "mobilenet_v3_small")
"""Networks also exported in float16 (a float16 BERT export mixes float and float16 inputs of one
LayerNormalization, which onnxruntime refuses)."""

QDQ = ("resnet18", "resnet50", "mobilenet_v2")
"""Networks also exported quantized: onnxruntime's static quantization (its default QDQ format, uint8
activations, int8 weights per output channel) calibrated on random batches, as users quantize; and
with 7-bit weights (onnxruntime's reduce_range), as it advises for CPUs without VNNI."""
