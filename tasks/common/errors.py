"""docflow's exceptions; the CLI maps them to exit codes in one place (flows/commands/common.py)."""

from __future__ import annotations


class DocflowError(Exception):
    """Base of every error docflow raises on purpose."""


class ConfigError(DocflowError):
    """A bad option, config file or environment variable (CLI exit code 2)."""


class LoadError(DocflowError):
    """A file that cannot be loaded; recorded with its one-line reason, never fatal."""


class EmbedError(DocflowError):
    """The embedding model cannot be loaded or used."""


class LLMError(DocflowError):
    """The LLM endpoint failed, timed out, kept refusing, or gave no valid reply twice."""


class StoreError(DocflowError):
    """The vector store refused an operation or does not match this run's settings."""


class StateError(DocflowError):
    """The data dir's state (manifest, lexical index, tables) is damaged, full or unwritable."""
