# tend as a container sidecar: keeps a shared volume equal to a Git path.
#   docker build -t tend .
#   docker run -v site:/data tend run --repo https://git.example.com/site.git --mirror --root /data
#
# The base images are build arguments. By default they come from registries
# (Rust's official image to build, distroless's glibc runtime to run);
# scripts/build-image fills them with bases made on the machine instead, and
# hands the crates in as vendor/ in the build context, which the build then
# uses offline. Without vendor/ the crates come from crates.io.
ARG BUILD_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/cc-debian12:nonroot

FROM ${BUILD_IMAGE} AS build
LABEL tend.stage=build
WORKDIR /src
# zlib linked in: the binary then needs only glibc, libgcc_s and OpenSSL's
# libssl3, which every runtime base here carries (distroless has no zlib).
ENV LIBZ_SYS_STATIC=1
# The etcd client crate compiles etcd's protocol with protoc at build time;
# a builder that has it already (scripts/build-image's) skips the install.
RUN [ -e /usr/include/google/protobuf/descriptor.proto ] || { apt-get update -qq \
      && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends protobuf-compiler libprotobuf-dev >/dev/null \
      && rm -rf /var/lib/apt/lists/*; }
# .dockerignore lets in Cargo.toml, Cargo.lock, src and vendor alone.
COPY . .
RUN if [ -d vendor ]; then \
      set -- --offline --config 'source.crates-io.replace-with="vendored"' \
             --config 'source.vendored.directory="vendor"'; \
    fi \
 && cargo build --release --locked "$@" \
 && strip target/release/tend \
 && mkdir -p /empty

FROM ${RUNTIME_IMAGE}
COPY --from=build /src/target/release/tend /usr/local/bin/tend
# The state dir (a volume) and the usual root of the published tree, owned
# by the user tend runs as, so volumes mounted there start writable.
COPY --from=build --chown=65532:65532 /empty/ /var/lib/tend/
COPY --from=build --chown=65532:65532 /empty/ /data/
USER 65532:65532
ENV TEND_STATE_DIR=/var/lib/tend \
    TEND_LISTEN=0.0.0.0:9420
VOLUME ["/var/lib/tend"]
EXPOSE 9420
# Healthy once the first pass has ended (GET /readyz) while the loop is
# alive (GET /healthz), asked at TEND_LISTEN: compose's service_healthy then
# means the volume is filled. A first clone of a large repository may take
# a while, hence the start period.
HEALTHCHECK --interval=30s --timeout=5s --start-period=2m --retries=3 CMD ["tend", "health", "--ready"]
ENTRYPOINT ["tend"]
CMD ["run"]
