# syntax=docker/dockerfile:1
#
# gttsplit: the collector and aggregator binaries on a small Alpine image,
# with the recorded reference runs (testdata/runs) for replays and
# `aggregator quickstart`.
#
#   docker build -t gttsplit:dev --build-arg VERSION=$(git describe --always --dirty) .
#   docker run --rm gttsplit:dev aggregator quickstart
#   docker run --rm -p 8080:8080 -p 4222:4222 -e GTTSPLIT_NATS_TOKEN=... gttsplit:dev \
#     aggregator serve --embedded-listen 0.0.0.0:4222 --http 0.0.0.0:8080 --json-dir /out/json
#
# (the embedded server listens beyond loopback only with a token or a user
# and password, which it then demands of every client)
#
# docker-compose.yml runs it with a NATS server (see the README).

FROM golang:1.26 AS build
# VERSION names the build in every split's provenance. Left empty, the
# binaries report the commit they were built from (the context's .git), as
# `go build` in a checkout does.
ARG VERSION=""
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Static binaries: the runtime image needs no C library of the builder's.
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X github.com/gttsplit/gttsplit/internal/cli.stamped=${VERSION}" \
      -o /dist/ ./cmd/collector ./cmd/aggregator \
 && /dist/aggregator --version

FROM alpine:3.22
# A fixed non-root user; /out (sinks), /data (the embedded server's store)
# and /spool (the collector's spool) belong to it, so fresh named volumes
# mounted there are writable.
RUN addgroup -S -g 65532 gttsplit \
 && adduser -S -D -u 65532 -G gttsplit -h /home/gttsplit gttsplit \
 && mkdir -p /out /data /spool \
 && chown gttsplit:gttsplit /out /data /spool \
 && ln -s /testdata /home/gttsplit/testdata
COPY --from=build /dist/collector /dist/aggregator /usr/local/bin/
COPY testdata/runs /testdata/runs
USER gttsplit
# The working directory is the user's home, so `aggregator quickstart`
# finds testdata/runs/*/events.jsonl (a link to /testdata) and writes
# quickstart-out/ where it may; the embedded server's store is /data.
WORKDIR /home/gttsplit
ENV GTTSPLIT_SPOOL_DIR=/spool GTTSPLIT_EMBEDDED_STORE=/data
EXPOSE 8080 4222
CMD ["aggregator", "--help"]
