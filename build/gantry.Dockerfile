# The gantry image: the static binary alone (CGO_ENABLED=0), nothing else. Build context: a
# directory holding the binary as `gantry` (make images does this).
#   docker run --network host -v /var/run/docker.sock:/var/run/docker.sock gantry serve ...
FROM scratch
COPY gantry /gantry
ENTRYPOINT ["/gantry"]
CMD ["serve", "--listen", "127.0.0.1:8080", "--data", "/data"]
