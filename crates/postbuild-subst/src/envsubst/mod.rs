//! The `${VAR}` expression language of fluxcd/pkg `envsubst` (DESIGN.md section 2.1).
