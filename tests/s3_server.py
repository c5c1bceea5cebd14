"""A real S3 server on 127.0.0.1 for the tests of s3:// tables: moto's (``moto_server``, an independent
implementation of the S3 API, from the dev lock), run in a thread of the test process. Requests must be
signed with an access key the server issued: the fixture creates an IAM user allowed s3:* with one key, then
turns the server's authentication on, so wrong or missing credentials are refused as AWS refuses them."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

REGION = "us-east-1"
USER = "snakeddp-tests"
ALLOW_S3 = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}


class S3Server:
    def __init__(self, home: Path) -> None:
        from moto.server import ThreadedMotoServer

        self.home = home  # where the tests' AWS config files go, so none of the machine's is read
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.server.start()
        host, port = self.server.get_host_and_port()
        self.port = port
        self.endpoint = f"http://{host}:{port}"
        # Any key may act until authentication is on: the one that issues the tests' key.
        iam = self._client("iam", "bootstrap", "bootstrap")
        iam.create_user(UserName=USER)
        iam.put_user_policy(UserName=USER, PolicyName="s3", PolicyDocument=json.dumps(ALLOW_S3))
        issued = iam.create_access_key(UserName=USER)["AccessKey"]
        self.key_id, self.secret = issued["AccessKeyId"], issued["SecretAccessKey"]
        self._moto_api("reset-auth", b"0")  # from now on every request is checked

    def _moto_api(self, action: str, body: bytes) -> None:
        # Not urllib's default form type: moto reads the raw body, which Flask leaves empty for a form.
        headers = {"Content-Type": "application/octet-stream"}
        request = urllib.request.Request(f"{self.endpoint}/moto-api/{action}", data=body, headers=headers)
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200, response.read()

    def _client(self, service: str, key_id: str, secret: str):
        import boto3

        # A session of its own: boto3's default one keeps the first credentials it found.
        session = boto3.session.Session(aws_access_key_id=key_id, aws_secret_access_key=secret, region_name=REGION)
        return session.client(service, endpoint_url=self.endpoint)

    def env(self) -> dict[str, str]:
        """The AWS variables that reach this server with the issued key, and no AWS config of the machine's."""
        return {
            "AWS_ACCESS_KEY_ID": self.key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_CONFIG_FILE": str(self.home / "config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(self.home / "credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
        }

    def upload(self, bucket: str, key: str, data: bytes) -> str:
        """Put ``data`` at bucket/key, creating the bucket; return the object's ETag."""
        s3 = self._client("s3", self.key_id, self.secret)
        if bucket not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
            s3.create_bucket(Bucket=bucket)
        return s3.put_object(Bucket=bucket, Key=key, Body=data)["ETag"]

    def stop(self) -> None:
        # moto's state lives in this process: leave none behind for other tests.
        self._moto_api("reset-auth", b"inf")
        self._moto_api("reset", b"")
        self.server.stop()
