"""doctor: the preflight with verification as verdicts (doctor), over many models and cards
(doctor_many), with the engine's own model build (model_build). Stands on the start path."""
