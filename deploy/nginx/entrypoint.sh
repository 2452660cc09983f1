#!/bin/sh
# What the official nginx image's entrypoint does with templates, for deploy/nginx/Dockerfile's image: every
# /etc/nginx/templates/NAME.template becomes /etc/nginx/conf.d/NAME, with only the environment variables whose
# names match NGINX_ENVSUBST_FILTER (all of them when it is unset) filled in, so nginx's own $variables stay.
set -eu
templates="${NGINX_ENVSUBST_TEMPLATE_DIR:-/etc/nginx/templates}"
out="${NGINX_ENVSUBST_OUTPUT_DIR:-/etc/nginx/conf.d}"
suffix="${NGINX_ENVSUBST_TEMPLATE_SUFFIX:-.template}"
filter="${NGINX_ENVSUBST_FILTER:-}"
names="$(env | cut -d= -f1 | grep -E "${filter:-.}" | sed 's/.*/${&}/' | tr '\n' ' ' || true)"
for template in "$templates"/*"$suffix"; do
    [ -f "$template" ] || continue
    target="$out/$(basename "$template" "$suffix")"
    echo "lensa-nginx-entrypoint: $template -> $target" >&2
    envsubst "$names" <"$template" >"$target"
done
mkdir -p /tmp/nginx
exec "$@"
