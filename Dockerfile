# tend as a container sidecar: keeps a shared volume equal to a Git path.
#   docker run -v site:/data tend run --repo https://git.example.com/site.git --mirror --root /data
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
RUN cargo build --release --locked && strip target/release/tend

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates openssh-client \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/tend /usr/local/bin/tend
ENV TEND_STATE_DIR=/var/lib/tend \
    TEND_LISTEN=0.0.0.0:9420
VOLUME ["/var/lib/tend"]
EXPOSE 9420
ENTRYPOINT ["/usr/local/bin/tend"]
CMD ["run"]
