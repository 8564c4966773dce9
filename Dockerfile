# One image for every Kairos process: the compose file picks the service by its command
# (`kairos api`, `kairos dispatcher`, `kairos worker --id ...`, `kairos notifier`, ...).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

COPY . /app
RUN pip install --no-cache-dir . \
    && useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin kairos

USER kairos

EXPOSE 8000

CMD ["kairos", "--help"]
