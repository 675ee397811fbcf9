"""The ledger's fingerprint key: data fingerprints are keyed, never plain hashes.

A plain SHA-256 of the data file is a deterministic function of the data: an adversary who
knows every row but one (the adversary differential privacy is defined against) hashes each
candidate for the last row and recovers it. So the ledger stores only
``HMAC-SHA256(key, plain fingerprint)``, with a 256-bit key from the OS CSPRNG that is never
stored in the ledger: it lives in a file of its own, owner-only, readable by those who may
read the data (they compute fingerprints), beside a SQLite ledger (``<ledger>.key``) or, for
a database URL, at ``$DPRELEASE_LEDGER_KEY`` or ``~/.config/dprelease/keys/<ledger id>.key``.

Larger data-dependent records (a data set's identity by its records: sketches of its record
hashes, :mod:`dprelease.data.identity`) are stored sealed: AES-256-GCM under a key derived from
the fingerprint key (HKDF-SHA256), a fresh random nonce each time, the ledger's id as associated
data, the plaintext of a fixed size. Without the key a sealed record is indistinguishable from
random bytes of that size: it says nothing of the data, not even how many rows it has.

The ledger records a check value (an HMAC of a constant under the key, which says nothing of
any data) so that a wrong or missing key is refused instead of silently producing fingerprints
that match nothing: two keys would mean the same data no longer looks the same.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from dprelease.host import files
from dprelease.errors import LedgerError
from dprelease.ledger.location import LedgerLocation

KEY_ENV = "DPRELEASE_LEDGER_KEY"
PREFIX = "hmac-sha256:"
_CHECK = b"dprelease ledger fingerprint key check:"
SEALED = "sealed-aes256gcm:"
_SEALING = b"dprelease ledger: the key that seals data identities"
_SEALED_FOR = b"dprelease sealed data identity, ledger "


def key_path(location: LedgerLocation, ledger_id: str) -> Path:
    """Where the key of the ledger at ``location`` (with id ``ledger_id``) lives."""
    if os.environ.get(KEY_ENV):
        path = Path(os.environ[KEY_ENV]).expanduser()
        if not path.is_absolute():
            raise LedgerError(f"${KEY_ENV} must be an absolute path, not {str(path)!r}")
        return path
    if location.sqlite_path is not None:
        return beside(location.sqlite_path)
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".config"
    return base / "dprelease" / "keys" / f"{ledger_id}.key"


def beside(ledger: Path) -> Path:
    """Where a SQLite ledger's own key lives: ``<ledger>.key`` beside it."""
    return ledger.with_name(ledger.name + ".key")


def check_value(key: bytes, ledger_id: str) -> str:
    """What the ledger stores to recognise its key: an HMAC of a constant (no data in it)."""
    return hmac.new(key, _CHECK + ledger_id.encode(), hashlib.sha256).hexdigest()


def keyed(key: bytes, plain: str) -> str:
    """The keyed fingerprint of a plain one (``sha256:...``): what the ledger may hold."""
    if plain.startswith(PREFIX):
        raise ValueError("already keyed")
    return PREFIX + hmac.new(key, plain.encode("utf-8"), hashlib.sha256).hexdigest()


def seal(key: bytes, ledger_id: str, plain: bytes) -> str:
    """``plain`` sealed under the ledger's key (see the module docstring): what the ledger may hold."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM  # (not on every command's start-up path)

    nonce = secrets.token_bytes(12)
    sealed = AESGCM(_sealing_key(key)).encrypt(nonce, plain, _SEALED_FOR + ledger_id.encode())
    return SEALED + base64.b64encode(nonce + sealed).decode("ascii")


def unseal(key: bytes, ledger_id: str, sealed: str) -> bytes | None:
    """What :func:`seal` sealed, or None: another key, another ledger, or not a sealed record."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    if not sealed.startswith(SEALED):
        return None
    try:
        raw = base64.b64decode(sealed.removeprefix(SEALED), validate=True)
        return AESGCM(_sealing_key(key)).decrypt(raw[:12], raw[12:], _SEALED_FOR + ledger_id.encode())
    except (InvalidTag, ValueError, binascii.Error):
        return None


def _sealing_key(key: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SEALING).derive(key)


def read_key(path: Path) -> bytes | None:
    """The key at ``path``, or None where there is none. A file that is not a key is refused."""
    try:
        text = path.read_text("ascii").strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LedgerError(f"cannot read the ledger's fingerprint key at {path}: {exc}") from None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise LedgerError(f"{path} is not a dprelease fingerprint key (64 hexadecimal digits)")
    return key


def create_key(path: Path) -> bytes:
    """A new key, written owner-only and linked into place whole (never half-written); where
    another process won the race, its key."""
    key = secrets.token_bytes(32)
    try:
        if files.write_new(path, (key.hex() + "\n").encode("ascii")):  # 0600, in 0700 directories
            return key
    except OSError as exc:
        raise LedgerError(f"cannot create the ledger's fingerprint key at {path}: {exc.strerror or exc}") from None
    existing = read_key(path)
    assert existing is not None
    return existing


def keys_differ(a: str, b: str) -> bool:
    return not hmac.compare_digest(a, b)
