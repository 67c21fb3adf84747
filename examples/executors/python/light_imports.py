"""SDK imports made cheaper, without changing what the executor runs.

A worker is a process of its own, started again after every crash, so what its SDKs load at
import is paid on every start: in the harness's catalog run, imports were most of the CPU the
workers used. The SDKs load, at import, large parts this executor never calls:

- stripe-python picks its *async* HTTP client when `stripe` is imported, and imports aiohttp
  for it whenever aiohttp is installed (web3.py brings it in). This executor uses the
  synchronous requests client only. `import_stripe()` imports stripe with aiohttp refused to
  that one import (stripe then falls back to its "no async client" stand-in, which raises only
  if async is used); aiohttp stays importable for everything else.
- eth-account imports eth-keyfile, which imports py_ecc's BLS12-381 code for keystores of
  version 4 (BLS keys); py_ecc computes pairing tables at import (about 0.8 s of pure Python).
  This executor signs with a secp256k1 key and never reads a keystore. `import_chain_sdks()`
  imports web3 and eth-account with stand-ins for the two py_ecc modules eth-keyfile names:
  the one constant it reads at import, and a placeholder that imports the real BLS code the
  first time anything uses it. The stand-ins leave `sys.modules` once the import is done.
- web3.py imports aiohttp for its *async* providers, and aiohttp makes two TLS contexts at
  import, loading the system's certificate store twice (about 0.13 s of CPU per chain worker,
  over 40 imports). This executor uses the synchronous HTTPProvider, on requests.
  Under the same import, web3 gets a stand-in aiohttp with the five names it imports, each a
  class that makes the real one when called. (An `except aiohttp.ClientError` in web3's async
  code would not catch the real error; that code is never run here.)

All are taken under one lock: the refusal and the stand-ins must never meet another thread's
import (a pass imports on threads of its own).
"""

import importlib
import sys
import threading

_LOCK = threading.Lock()
# What is imported whole: another thread may be halfway through an import, and a module in
# `sys.modules` is not necessarily initialised yet.
_done = {}


class _Refuse:
    """A finder on `sys.meta_path` that refuses `names` (and their submodules) to the imports
    of one thread; other threads import them as usual."""

    def __init__(self, names):
        self.names = names
        self.thread = threading.get_ident()

    def find_spec(self, fullname, path=None, target=None):
        if threading.get_ident() == self.thread and fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r} (not needed here)", name=fullname)
        return None


def import_stripe():
    """`import stripe`, without the aiohttp it would import for an async client."""
    if "stripe" in _done:
        return _done["stripe"]
    with _LOCK:
        if "stripe" not in _done:
            refuse = _Refuse({"aiohttp"})
            sys.meta_path.insert(0, refuse)
            try:
                _done["stripe"] = importlib.import_module("stripe")
            finally:
                sys.meta_path.remove(refuse)
        return _done["stripe"]


# The order of the BLS12-381 group (py_ecc.bls12_381.curve_order), which eth-keyfile reads at
# import to bound a version 4 key.
_BLS12_381_CURVE_ORDER = 0x73EDA753299D7D483339D80809A1D80553BDA402FFFE5BFEFFFFFFFF00000001


class _Deferred:
    """Stands for `module.name` and imports it when first used."""

    def __init__(self, module, name):
        self._where = (module, name)

    def __getattr__(self, attribute):
        module, name = self._where
        return getattr(getattr(importlib.import_module(module), name), attribute)


# What web3.py imports from aiohttp (web3/_utils/http_session_manager.py and its async
# providers).
_AIOHTTP_NAMES = ("ClientError", "ClientResponse", "ClientSession", "ClientTimeout", "TCPConnector")


def _deferred_class(module, name, base=object):
    """A class standing for `module.name`: calling it makes the real one."""

    def make(cls, *args, **kwargs):
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return type(name, (base,), {"__new__": make, "__module__": module})


def _aiohttp_stand_in():
    aiohttp = type(sys)("aiohttp")
    for name in _AIOHTTP_NAMES:
        base = Exception if name == "ClientError" else object
        setattr(aiohttp, name, _deferred_class("aiohttp", name, base))
    return aiohttp


def import_chain_sdks():
    """`import eth_account, web3`, without py_ecc's BLS code until something uses it, and
    without aiohttp."""
    if "chain" in _done:
        return
    with _LOCK:
        if "chain" in _done:
            return
        stand_ins = {}
        if "py_ecc.bls" not in sys.modules and "py_ecc.bls12_381" not in sys.modules:
            bls = type(sys)("py_ecc.bls")
            bls.G2ProofOfPossession = _Deferred("py_ecc.bls", "G2ProofOfPossession")
            curve = type(sys)("py_ecc.bls12_381")
            curve.curve_order = _BLS12_381_CURVE_ORDER
            stand_ins = {"py_ecc.bls": bls, "py_ecc.bls12_381": curve}
        if "aiohttp" not in sys.modules:
            stand_ins["aiohttp"] = _aiohttp_stand_in()
        sys.modules.update(stand_ins)
        try:
            importlib.import_module("eth_account")
            importlib.import_module("web3")
            _done["chain"] = True
        finally:
            # Only the stand-ins go: whatever imported the real modules meanwhile keeps them.
            for name, stand_in in stand_ins.items():
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]
