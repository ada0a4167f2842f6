#!/bin/bash
# recompile the kd32 tiled merge sources of art13 with ptxas cache-operator defaults
set -e
ART=/work/main/.gpu/art13
srcs=$(cd $ART && ls kd32_nh*/tiled-*.cu)
build() { # variant flags src
  v=$1; fl=$2; s=$3
  mkdir -p $v/$(dirname $s)
  nvcc --fatbin -O3 -std=c++17 -gencode=arch=compute_90,code=sm_90 $fl -o $v/${s%.cu}.fatbin $ART/$s 2>/dev/null
}
export -f build; export ART
for s in $srcs; do
  echo "base|" "$s"; echo "scs|-Xptxas -dscm=cs" "$s"; echo "lcs|-Xptxas -dlcm=cs" "$s"; echo "cs2|-Xptxas -dlcm=cs,-dscm=cs" "$s"; echo "slu|-Xptxas -dlcm=lu,-dscm=cs" "$s"
done | xargs -P 2 -I{} bash -c 'line="{}"; v=${line%%|*}; rest=${line#*|}; fl=${rest% *}; s=${rest##* }; build "$v" "$fl" "$s"'
