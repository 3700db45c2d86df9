"""The request bodies of the OpenAI API this server answers, as pydantic models: FastAPI checks
requests against them and publishes them in /openapi.json. Unknown fields are ignored, as
OpenAI's own API and llama-server ignore them."""
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field

MAX_N = 8              # choices per request (`n`), each a sequence of its own
MAX_STOPS = 4          # OpenAI's limit on stop strings
MAX_TOP_LOGPROBS = 20


class Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class ContentPart(Lenient):
    type: str
    text: str | None = None


class FunctionCall(Lenient):
    name: str
    arguments: str = "{}"


class ToolCall(Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Union[str, list[ContentPart], None] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class FunctionDef(Lenient):
    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict | None = None


class Tool(Lenient):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(Lenient):
    name: str


class NamedToolChoice(Lenient):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaFormat(Lenient):
    name: str = "response"
    schema_: dict = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(Lenient):
    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None


class StreamOptions(Lenient):
    include_usage: bool = False


class Sampling(Lenient):
    """The fields chat and completions share (llama-server's defaults where OpenAI's differ:
    the defaults of `dasllama generate`)."""
    model: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, ge=0, le=1)
    top_k: int | None = Field(None, ge=0)
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, gt=0, le=10)
    max_tokens: int | None = Field(None, ge=1)
    stop: Union[str, list[str], None] = None
    seed: int | None = None
    n: int = Field(1, ge=1, le=MAX_N)
    stream: bool = False
    stream_options: StreamOptions | None = None


class ChatRequest(Sampling):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Union[Literal["none", "auto", "required"], NamedToolChoice, None] = None


class CompletionRequest(Sampling):
    prompt: Union[str, list[str], list[int], list[list[int]]]
    logprobs: int | None = Field(None, ge=0, le=5)


class EmbeddingRequest(Lenient):
    input: Union[str, list[str], list[int], list[list[int]]]
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, ge=1)


class SpeechRequest(Lenient):
    model: str | None = None
    input: str = Field(min_length=1, max_length=4096)
    voice: str | None = None
    response_format: Literal["wav", "pcm"] = "wav"
    speed: float = Field(1.0, ge=0.25, le=4.0)
    # not OpenAI's: Piper voices draw their noise at random, as piper does; a seed repeats a take
    seed: int | None = Field(None, ge=0, le=0xFFFFFFFF)
