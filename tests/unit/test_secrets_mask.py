"""Credentials never reach a log line or an error message."""

from __future__ import annotations

from common.errors import StoreUnavailableError
from common.secrets_mask import mask_text, masked_url


def test_a_url_password_is_masked_and_the_rest_kept() -> None:
    assert masked_url("amqp://kairos:s3cret@mq:5672/ns") == "amqp://kairos:***@mq:5672/ns"
    assert masked_url("mysql+pymysql://root@db:3306") == "mysql+pymysql://root@db:3306"
    assert masked_url("redis://:pw@cache:6379/0") == "redis://:***@cache:6379/0"


def test_passwords_inside_any_text_are_masked() -> None:
    text = "failed: http://guest:guest@127.0.0.1:15672/api and amqp://u:p%40x@h/v"
    assert mask_text(text) == "failed: http://guest:***@127.0.0.1:15672/api and amqp://u:***@h/v"


def test_a_store_error_shows_no_password() -> None:
    error = StoreUnavailableError(
        "RabbitMQ", "amqp://kairos:s3cret@mq:5672", "AMQPConnectionError('amqp://kairos:s3cret@mq')"
    )
    assert "s3cret" not in str(error)
    assert "amqp://kairos:***@mq:5672" in str(error)
