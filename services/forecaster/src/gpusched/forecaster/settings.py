"""Settings of the forecaster service (environment, prefix GPUSCHED_FORECASTER_ for its own)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict

from gpusched.contracts import KafkaSettings
from gpusched.forecaster.models import ModelConfig

__all__ = ["ForecasterSettings"]


class ForecasterSettings(KafkaSettings):
    """What to forecast, how often, how far, and within what time."""

    model_config = SettingsConfigDict(env_prefix="GPUSCHED_", frozen=True, extra="ignore")

    forecaster_step_s: int = Field(default=600, ge=60, le=86400, description="series step")
    forecaster_horizon_s: int = Field(
        default=6 * 3600, ge=60, description="how far each published forecast reaches"
    )
    forecaster_refit_s: float = Field(
        default=3600.0, gt=0, description="time between refits of every series (live service)"
    )
    forecaster_replay_refit_s: float = Field(
        default=86400.0,
        gt=0,
        description="time between refits in `gpusched replay` (simulated time; forecasts "
        "then reach refit + horizon ahead)",
    )
    forecaster_history_days: float = Field(
        default=28.0,
        gt=0,
        description="the past the models read at most: ended jobs older than this are "
        "forgotten by the demand model; Prophet's fit window (backtest)",
    )
    forecaster_min_history_s: float = Field(
        default=2 * 86400.0,
        ge=0,
        description="Prophet (backtest): with less history a series falls back to "
        "seasonal-naive (said in the forecast's note)",
    )
    forecaster_interval_width: float = Field(
        default=0.8, gt=0, lt=1, description="width of the forecast intervals"
    )
    forecaster_changepoint_prior: float = Field(
        default=0.5,
        gt=0,
        description="Prophet changepoint_prior_scale (trend flexibility; backtest)",
    )
    forecaster_workers: int = Field(default=2, ge=1, description="series fitted in parallel")
    forecaster_fit_budget_s: float = Field(
        default=120.0,
        gt=0,
        description="time allowed for one round of fits; late series get seasonal-naive",
    )
    forecaster_headroom_classes: str = Field(
        default="high",
        description="comma-separated priority classes whose arrivals are forecast on their own",
    )
    forecaster_group_id: str = Field(
        default="gpusched-forecaster", description="consumer group on the jobs topic"
    )

    def models(self) -> ModelConfig:
        """The model configuration these settings describe."""
        return ModelConfig(
            step_s=float(self.forecaster_step_s),
            interval_width=self.forecaster_interval_width,
            history_s=self.forecaster_history_days * 86400.0,
            min_history_s=self.forecaster_min_history_s,
            changepoint_prior_scale=self.forecaster_changepoint_prior,
        )

    @property
    def classes(self) -> tuple[str, ...]:
        return tuple(c.strip() for c in self.forecaster_headroom_classes.split(",") if c.strip())
