import libvirt
import pytest

from providers import base
from providers.kvm import errors
from providers.kvm.errors import DialError, Stage, classify
from tests.providers.kvm.fakes import lv_error


@pytest.mark.parametrize(
    ("exc", "cls"),
    [
        (lv_error(libvirt.VIR_ERR_NO_DOMAIN, 10), base.NotFound),
        (lv_error(libvirt.VIR_ERR_NO_STORAGE_VOL, 18), base.NotFound),
        (lv_error(libvirt.VIR_ERR_XML_ERROR, 20), base.Permanent),
        (lv_error(libvirt.VIR_ERR_XML_DETAIL, 20), base.Permanent),
        (lv_error(libvirt.VIR_ERR_INVALID_ARG, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_NO_SUPPORT, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_CONFIG_UNSUPPORTED, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_AUTH_FAILED, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_AUTH_CANCELLED, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_AUTH_UNAVAILABLE, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_ACCESS_DENIED, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_OPERATION_DENIED, 0), base.Permanent),
        (lv_error(libvirt.VIR_ERR_NO_STORAGE_POOL, 18), base.Permanent),
        (lv_error(libvirt.VIR_ERR_INTERNAL_ERROR, 0), base.Transient),
        (lv_error(libvirt.VIR_ERR_OPERATION_INVALID, 10), base.Transient),
        (lv_error(libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_FROM_RPC), base.Transient),  # transport, not a verdict
        (lv_error(libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_RPC), base.Transient),
        (DialError(Stage.SSH_MATERIAL, "missing key"), base.Transient),
        (DialError(Stage.TCP, "refused"), base.Transient),
        (DialError(Stage.SSH_HANDSHAKE, "auth failed"), base.Transient),  # see errors.py: fixed in the Secret
        (DialError(Stage.LIBVIRT_CONNECT, "no socket"), base.Transient),
        (errors.DeadlineError("late"), base.Transient),
        (OSError("reset"), base.Transient),
        (ValueError("not an SDK error"), base.Transient),
        (base.Permanent("get", "kvm", "x", "bad id"), base.Permanent),
    ],
)
def test_classify(exc, cls):
    assert classify(exc) is cls


def test_codes_match_libvirt():
    for name in ("NO_SUPPORT", "INVALID_ARG", "OPERATION_DENIED", "XML_ERROR", "NO_DOMAIN", "AUTH_FAILED",
                 "NO_STORAGE_POOL", "NO_STORAGE_VOL", "ACCESS_DENIED", "AUTH_CANCELLED", "AUTH_UNAVAILABLE",
                 "XML_DETAIL", "CONFIG_UNSUPPORTED", "INTERNAL_ERROR"):
        assert getattr(errors, f"VIR_ERR_{name}") == getattr(libvirt, f"VIR_ERR_{name}"), name
    assert errors.VIR_FROM_RPC == libvirt.VIR_FROM_RPC


def test_libvirt_error_without_last_error_is_still_libvirt():
    exc = libvirt.libvirtError("x")
    exc.err = None
    assert errors.is_libvirt_error(exc)
