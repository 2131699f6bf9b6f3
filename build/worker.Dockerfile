# A built-in worker as an image (gantry/echo, gantry/http-echo, ...): the same static binary,
# run as `gantry worker NAME`. Build with --build-arg WORKER=echo -t gantry/echo.
FROM scratch
ARG WORKER=echo
COPY gantry /gantry
ENV GANTRY_WORKER=${WORKER}
ENTRYPOINT ["/gantry", "worker"]
