"""The service's settings: the one place temper reads environment variables.

Every variable is `TEMPER_<FIELD>` (TEMPER_DATA_DIR, TEMPER_DATABASE_URL, ...). Settings are read
when `get_settings()` is called, never at import time, and are frozen afterwards: the API, the
workers and the CLI receive a Settings object and pass it down instead of looking at the
environment themselves.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from storage.session import default_data_dir, default_url

MIB = 1024 * 1024


class Settings(BaseSettings):
    """Where data lives, how big uploads may be, how workers lease jobs, where Dask runs."""

    model_config = SettingsConfigDict(env_prefix="TEMPER_", frozen=True, extra="forbid")

    data_dir: Path = Field(default_factory=lambda: default_data_dir(None))
    # empty: the SQLite file in data_dir (filled in by the validator below)
    database_url: str = Field(default="", validate_default=True, repr=False)  # may hold a password
    max_upload_bytes: int = Field(default=256 * MIB, gt=0)
    dask_scheduler: str | None = None  # "tcp://host:port": builds and measurements go to Dask
    embedded_worker: bool = True  # `temper serve` runs a worker thread in its own process
    worker_lease_s: float = Field(default=30.0, gt=0)
    job_poll_s: float = Field(default=0.5, gt=0)
    target: str = "host"
    api_key: SecretStr | None = None  # the key the CLI's --server runs send (a client setting)
    # imported tuning records a worker verifies per idle round (tuner.verify)
    verify_batch: int = Field(default=8, ge=1, le=1024)
    # every job's time limit: a tuning job stops searching there (its records stay), a compile fails
    job_timeout_s: float = Field(default=6 * 3600.0, gt=0)
    # a compile (or an upload's analysis, an IR request) runs in a child process with these limits
    compile_timeout_s: float = Field(default=900.0, gt=0)
    compile_memory_bytes: int = Field(default=8 * 1024 * MIB, ge=256 * MIB)
    # signs every artifact (HMAC-SHA256 of its manifest): load(path, key=...) then refuses any other
    artifact_key: SecretStr | None = None

    @field_validator("data_dir", mode="after")
    @classmethod
    def _absolute_data_dir(cls, value: Path) -> Path:
        # absolute: worker processes started elsewhere must find the same files
        return default_data_dir(value).absolute()

    @field_validator("database_url", mode="after")
    @classmethod
    def _default_database(cls, value: str, info: ValidationInfo) -> str:
        if value.strip():
            return value.strip()
        data_dir = info.data.get("data_dir")
        return default_url(data_dir)

    @field_validator("dask_scheduler", mode="after")
    @classmethod
    def _empty_is_none(cls, value: str | None) -> str | None:
        return value.strip() or None if value is not None else None

    @property
    def blobs_dir(self) -> Path:
        """Uploaded models and artifacts (content-addressed, see storage.blobs)."""
        return self.data_dir / "blobs"


class ConfigError(ValueError):
    """A TEMPER_* variable with a value that cannot be used; the message names the variable."""


def get_settings(**overrides: Any) -> Settings:
    """Settings from the environment now (explicit `overrides` win over it); ConfigError when a
    variable is malformed."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = "; ".join(
            f"TEMPER_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"bad setting: {problems}") from None
