# syntax=docker/dockerfile:1
# The runtime image for users with Docker. CI builds the same image without
# Docker (hack/package.sh, go-containerregistry).
FROM golang:1.26 AS build
WORKDIR /fn
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /function .

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /function /function
EXPOSE 9443
USER 65532:65532
ENTRYPOINT ["/function"]
