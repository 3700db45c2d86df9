"""Chat requests as prompts: OpenAI messages through the model's own chat template, and tools.

Tool calls take llama.cpp's generic form (common/chat.cpp, "Generic"): the reply is one JSON
object, {"tool_call": {"name", "arguments"}} or {"response": text}, forced by a JSON schema.
A template that renders `tools` itself gets them; one that does not (SmolLM2's ChatML) gets
them described in the system message, as llama.cpp does.
"""
import json
import secrets

from ..llm.generate import chat_ids

GENERIC_TOOL_PROMPT = ("You can call these tools:\n{tools}\n\nRespond in JSON: either "
                       '{{"tool_call": {{"name": ..., "arguments": {{...}}}}}} to call a tool, or '
                       '{{"response": "..."}} to answer the user.')


def text_of(content):
    """A message's content as text: a string, or the text parts of a list."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(p.text or "" for p in content if p.type == "text")


def template_messages(messages, native_tools):
    """Plain {"role", "content"} dicts a chat template reads. A template without tool support
    sees an assistant's tool calls as its JSON reply and a tool's result as a user turn."""
    out = []
    for m in messages:
        role = "system" if m.role == "developer" else m.role
        content = text_of(m.content)
        entry = {"role": role, "content": content}
        if m.tool_calls:
            if native_tools:
                entry["tool_calls"] = [{"type": "function", "id": c.id, "function": {
                    "name": c.function.name, "arguments": _json_or_text(c.function.arguments)}}
                    for c in m.tool_calls]
            else:
                call = m.tool_calls[0].function
                entry["content"] = json.dumps({"tool_call": {
                    "name": call.name, "arguments": _json_or_text(call.arguments)}})
        if role == "tool" and not native_tools:
            entry = {"role": "user", "content": f"Tool result: {content}"}
        elif role == "tool":
            entry["tool_call_id"] = m.tool_call_id
        out.append(entry)
    return out


def _json_or_text(text):
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def renders_tools(template):
    return bool(template) and "tools" in template


def request_ids(model, messages, tools=None):
    """Token ids of a chat request's messages; tools (OpenAI definitions) are offered through
    the template when it renders them, else through the system message."""
    template = model.gguf.get("tokenizer.chat_template")
    native = renders_tools(template)
    msgs = template_messages(messages, native and bool(tools))
    if tools and not native:
        described = GENERIC_TOOL_PROMPT.format(tools=json.dumps(tools, ensure_ascii=False, indent=2))
        if msgs and msgs[0]["role"] == "system":
            msgs[0] = {**msgs[0], "content": msgs[0]["content"] + "\n\n" + described}
        else:
            msgs.insert(0, {"role": "system", "content": described})
    return chat_ids(model, msgs, tools=tools if native else None)


def tool_schema(tools, tool_choice):
    """The JSON schema a reply must follow for these tools and tool_choice ("auto",
    "required", or one named function); None when no tool may be called."""
    if not tools or tool_choice == "none":
        return None
    if isinstance(tool_choice, str) or tool_choice is None:
        chosen = tools
    else:
        chosen = [t for t in tools if t["function"]["name"] == tool_choice.function.name]
    calls = [{"type": "object", "properties": {
        "name": {"const": t["function"]["name"]},
        "arguments": t["function"].get("parameters") or {"type": "object"}},
        "required": ["name", "arguments"]} for t in chosen]
    call = {"type": "object", "properties": {"tool_call": {"anyOf": calls} if len(calls) > 1 else calls[0]},
            "required": ["tool_call"]}
    if tool_choice in (None, "auto"):
        reply = {"type": "object", "properties": {"response": {"type": "string"}},
                 "required": ["response"]}
        return {"anyOf": [call, reply]}
    return call


def parse_tool_reply(text):
    """(content, tool_calls) of a generic-form reply; a reply that is not one is content."""
    try:
        reply = json.loads(text)
    except ValueError:
        return text, None
    if isinstance(reply, dict) and isinstance(reply.get("tool_call"), dict):
        call = reply["tool_call"]
        return None, [{"id": "call_" + secrets.token_hex(12), "type": "function",
                       "function": {"name": str(call.get("name", "")),
                                    "arguments": json.dumps(call.get("arguments", {}), ensure_ascii=False)}}]
    if isinstance(reply, dict) and isinstance(reply.get("response"), str):
        return reply["response"], None
    return text, None
