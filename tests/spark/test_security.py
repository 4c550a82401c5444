"""The Spark source and sink against a cluster with ACL and TLS on: options carry credentials and TLS
to the driver and the executors; without credentials a read fails with the broker's refusal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acl_accounts import BROKER_CREDENTIALS, account, acl_toml, write_acl
from tests.spark.conftest import ClusterThread
from tests.tls_certs import Certs, make_certs

ACL = acl_toml(account("spark", topic_perms={"secured": "PUB|SUB"}, default_group_perm="SUB"))


@pytest.fixture(scope="module")
def secured_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ClusterThread, Certs]]:
    base = tmp_path_factory.mktemp("spark-secured")
    certs = make_certs(base / "certs")
    acl_file = write_acl(base / "acl.toml", ACL)
    tls = {"enable": True, "cert_file": certs.server_cert, "key_file": certs.server_key, "ca_file": certs.ca}
    acl = {"enable": True, "file": acl_file}
    c = ClusterThread(
        base / "cluster",
        brokers=1,
        namesrv={"acl": acl, "tls": tls},
        broker={"acl": {**acl, **BROKER_CREDENTIALS}, "tls": {**tls, "client": True}},
    )
    try:
        c.create_topic("secured", 2)
        yield c, certs
    finally:
        c.close()


def test_sink_and_source_with_credentials_over_tls(spark, secured_cluster, tmp_path: Path) -> None:
    cluster, certs = secured_cluster
    options = {
        "namesrv": f"tls://{cluster.namesrv}",
        "accessKey": "spark",
        "secretKey": "spark-secret",
        "tlsCaFile": str(certs.ca),
    }
    rows = [("secured", f"row-{i}") for i in range(12)]
    df = spark.createDataFrame(rows, "topic string, body string")
    df.write.format("pymq").options(**options).mode("append").save()
    back = spark.read.format("pymq").options(**options).option("topic", "secured").load().collect()
    assert sorted(bytes(r.body).decode() for r in back) == sorted(b for _, b in rows)

    unsigned = {k: v for k, v in options.items() if k not in ("accessKey", "secretKey")}
    with pytest.raises(Exception, match="request not signed"):
        spark.read.format("pymq").options(**unsigned).option("topic", "secured").load().collect()
