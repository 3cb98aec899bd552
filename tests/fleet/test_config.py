"""Providers-file validation: every rule, with the message it prints."""

import pytest

from fleet.config import ConfigError, load, parse
from providers import registry


def problems(data) -> list[str]:
    with pytest.raises(ConfigError) as err:
        parse(data, "test.yaml")
    return err.value.problems


def ok(name="a", type_="fake", **extra):
    return {"name": name, "type": type_, **extra}


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ([], "the file must be a mapping with a 'providers' list (got [])"),
        ({"providers": "x"}, "providers: must be a list (got 'x')"),
        ({"providers": [], "extra": 1}, "extra: unknown key (its value, an integer, is not shown)"),
        ({"providers": ["x"]}, "providers[0]: must be a mapping with name and type (got 'x')"),
        ({"providers": [{"type": "fake"}]}, "providers[0].name: is required and must be a string (got None)"),
        ({"providers": [ok(name="Home_KVM")]}, "providers[0].name: must be a DNS-1123 label"),
        ({"providers": [ok(name="Home_KVM")]}, "(got 'Home_KVM')"),
        ({"providers": [ok(name="-a")]}, "providers[0].name: must be a DNS-1123 label"),
        ({"providers": [ok(name="a" * 64)]}, "providers[0].name: must be at most 63 characters, has 64"),
        ({"providers": [ok(), ok()]}, "providers[1].name: duplicate of providers[0].name (got 'a')"),
        ({"providers": [ok(type_="azure")]}, "providers[0].type: must be one of"),
        ({"providers": [ok(type_="azure")]}, "(got 'azure')"),
        ({"providers": [ok(kubernetes={})]}, "providers[0].kubernetes: a fake provider takes only a 'fake' block"),
        ({"providers": [ok(nope={})]}, "providers[0].nope: unknown key (its value, a mapping, is not shown)"),
        ({"providers": [ok(fake={"bogus": 1})]}, "providers[0].fake.bogus: unknown key (its value, an integer, is not shown)"),
        ({"providers": [ok(fake={"latencyMS": 1})]}, "providers[0].fake.latencyMS: unknown key; did you mean 'latencyMs'?"),
        ({"providers": [ok(fake={"targets": [{"name": "t", "colour": 1}]})]}, "providers[0].fake.targets[0].colour: unknown key"),
        ({"providers": [ok(name="abc\n")]}, "providers[0].name: must be a DNS-1123 label"),
        ({"providers": [ok(type_=["fake"])]},
         "providers[0].type: must be one of aws, fake, gcp, hetzner, kubernetes, kvm, local, upstream (got a list of 1 item(s))"),
        ({"providers": [ok(type_={"a": 1})]}, "providers[0].type: must be one of"),
        ({"providers": [ok(fake={"latencyMs": 10**400})]}, "providers[0].fake.latencyMs: Input should be less than or equal to 600000"),
        ({"providers": [ok(fake={"latencyMs": 10**400})]}, "(got an integer of about 401 digits)"),
        ({"providers": [ok(fake={"targets": [{"name": "t"}] * 1001})]}, "providers[0].fake.targets: List should have at most 1000 items"),
        ({"providers": [ok(fake={"targetCount": 10001})]}, "providers[0].fake.targetCount: Input should be less than or equal to 10000"),
        ({"providers": [ok(name="x" * 10**6)]}, "must be at most 63 characters, has 1000000 (got 'xxxx"),
        ({"providers": [ok(fake={"latencyMs": -1})]}, "providers[0].fake.latencyMs: Input should be greater than or equal to 0 (got -1)"),
        (
            {"providers": [ok(fake={"targets": [{"name": ""}]})]},
            "providers[0].fake.targets[0].name: String should have at least 1 character (got '')",
        ),
        (
            {"providers": [ok(type_="kubernetes", kubernetes={"image": 3})]},
            "providers[0].kubernetes.image: Input should be a valid string (got 3)",
        ),
        (
            {"providers": [ok(type_="kubernetes", kubernetes={"kubeconfig": ""})]},
            "providers[0].kubernetes.kubeconfig: String should have at least 1 character (got '')",
        ),
    ],
)
def test_rules(data, expected):
    got = problems(data)
    assert any(expected in p for p in got), got


def test_messages_are_bounded_and_never_show_secrets_or_unknown_values():
    secret = "#cloud-config\npassword: SENTINEL-9f2c"
    kvm = {"sshKeyFile": "/k", "knownHostsFile": "/kh", "hosts": [{"name": "h", "address": "h:22", "user": "u"}]}
    got = problems({"providers": [
        ok(name="k", type_="kvm", kvm={**kvm, "vendorDta": secret}),
        ok(name="v", type_="kvm", kvm={**kvm, "vendorData": ["SENTINEL-9f2c"]}),
        ok(name="y" * 10**6, fake={"targets": [{"name": "n" * 10**6}]}),
        {"name": "z", "type": "fake", "x" * 10**5: "SENTINEL-9f2c"},
    ]})
    text = "\n".join(got)
    assert "SENTINEL" not in text
    assert "providers[0].kvm.vendorDta: unknown key; did you mean 'vendorData'?" in text
    assert "providers[1].kvm.vendorData: Input should be a valid string (got <redacted>)" in text
    assert len(text) < 2000, text


def test_every_problem_is_listed():
    got = problems({"providers": [ok(name="BAD"), ok(type_="azure", name="b"), ok(name="c", fake={"x": 1})]})
    assert len(got) == 3, got


def test_type_allow_list_is_the_registry():
    got = problems({"providers": [ok(type_="azure")]})
    for t in registry.TYPES:
        assert t in got[0]


def test_block_may_be_omitted_or_null():
    cfg = parse({"providers": [ok(name="a"), ok(name="b", fake=None), {"name": "k", "type": "kubernetes"}]})
    assert cfg.names() == ["a", "b", "k"]
    assert cfg.get("k").block.image  # default image


def test_valid_name_edges():
    cfg = parse({"providers": [ok(name="a" * 63), ok(name="0-9")]})
    assert len(cfg.providers) == 2


def test_load_unreadable_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the providers file"):
        load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("providers: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load(bad)


def test_anchors_and_merge_keys_within_bounds_still_work(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("providers:\n  - &base {name: a, type: fake, fake: {targets: [{name: t}]}}\n  - <<: *base\n    name: b\n")
    assert load(f).names() == ["a", "b"]


def test_get_unknown_names_what_is_configured():
    cfg = parse({"providers": [ok(name="a")]})
    with pytest.raises(KeyError, match="have: a"):
        cfg.get("zzz")


def test_example_config_is_valid():
    cfg = load("deploy/examples/providers.yaml")
    assert cfg.names()
