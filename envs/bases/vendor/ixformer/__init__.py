# Stand-in for the Iluvatar vendor package in the local BI-100 base: its layout only (L3 installs
# the card's ops into functions/; contrib/ lacks vllm.layers, as the ixformer builds R7 shims do).
