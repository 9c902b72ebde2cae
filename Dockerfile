# syntax=docker/dockerfile:1
# drainer: one static binary on distroless (non-root, no shell). Needs BuildKit
# (the default builder of Docker 23+ and buildx).
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     -t ghcr.io/drainer-io/drainer:$(git describe --tags --always --dirty) .
#   docker buildx build --platform linux/amd64,linux/arm64 …   (cross-compiles, no emulation)
#
# The Deployment passes `run --config …` or `migrate` as args to /drainer.
# Port 9753 serves /metrics, /healthz and /readyz.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
# The cache mounts keep downloaded modules and compiled packages between
# builds; only the modules ./cmd/drainer imports are fetched.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags "-s -w -X main.version=$VERSION" -o /out/drainer ./cmd/drainer

# static-debian12 carries CA certificates and tzdata; :nonroot runs as 65532.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/drainer /drainer
USER nonroot:nonroot
EXPOSE 9753
ENTRYPOINT ["/drainer"]
